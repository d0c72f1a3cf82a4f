"""End-to-end helpers for the remoting front: ``rtimer run --remoting-listen 127.0.0.1:0`` in a real
subprocess, and the unmodified RocketMQ 4.x clients (built by ``make remoting-clients``) driven as
subprocesses that speak one JSON object per line.

A client that is missing skips its tests, except under ``CI=true``, where it fails them (the
project's rule for tests that need a real service).
"""
from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.support.run_support import wait_listening

ROOT = Path(__file__).resolve().parents[2]
JAVA_DIR = ROOT / "tests" / "fronts" / "java"
JAVA_CLASSES = JAVA_DIR / "target" / "classes"
JAVA_CLASSPATH = JAVA_DIR / "target" / "classpath.txt"
PY4 = ROOT / ".venv-rocketmq4" / "bin" / "python"
JS_DIR = ROOT / "tests" / "fronts" / "js"
_LISTENING = re.compile(r"remoting .* listening on 127\.0\.0\.1:(\d+)")


def need(ok: bool, what: str) -> None:
    """Skip (or fail under CI=true) when a client is not installed."""
    if ok:
        return
    text = f"{what} is not installed: run `make remoting-clients`"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(text)
    pytest.skip(text)


def need_java() -> None:
    need(shutil.which("java") is not None and JAVA_CLASSPATH.exists()
         and (JAVA_CLASSES / "rtimer" / "RemotingClient.class").exists(),
         "the RocketMQ 4.x Java client (tests/fronts/java)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RtimerProcess:
    """One ``rtimer run`` subprocess on ``data_dir`` with the remoting front on ``port``."""

    def __init__(self, data_dir: Path, port: int = 0, *extra: str):
        self.data_dir = Path(data_dir)
        self.requested_port = port
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.output: list[str] = []

    def start(self) -> "RtimerProcess":
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "--data-dir", str(self.data_dir), "run",
             "--grpc-listen", "off", "--remoting-listen", f"127.0.0.1:{self.requested_port}",
             *self.extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
        self.port = int(wait_listening(self.proc, _LISTENING, self.output).group(1))
        threading.Thread(target=self._drain, daemon=True).start()
        return self

    def _drain(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> str:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return "".join(self.output)


class LineClient:
    """A client subprocess that prints one JSON object per line; lines are queued as they come."""

    def __init__(self, argv: list[str], cwd: Path | None = None, env: dict | None = None):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=cwd, env=env)
        self.events: "queue.Queue[dict]" = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                try:
                    self.events.put(json.loads(line))
                except ValueError:
                    pass

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line)

    def write(self, doc) -> None:
        text = doc if isinstance(doc, str) else json.dumps(doc)
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def next(self, event: str, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        held: list[dict] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {event!r} event in {timeout_s} s; stderr:\n"
                                     + "".join(self.stderr[-30:]))
            try:
                got = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if got.get("event") == event or (got.get("event") == "error" and event == "sent"):
                for early in held:  # events that came first stay for collect()
                    self.events.put(early)
                return got
            held.append(got)

    def collect(self, event: str, until, timeout_s: float) -> list[dict]:
        """Events of kind ``event`` until ``until(events)`` holds or the time is up."""
        found: list[dict] = []
        deadline = time.monotonic() + timeout_s
        while not until(found):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                got = self.events.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if got.get("event") == event:
                found.append(got)
        return found

    def close(self, timeout_s: float = 30.0) -> None:
        try:
            self.write("stop")
            self.proc.stdin.close()
        except (BrokenPipeError, ValueError):
            pass
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class JavaClient(LineClient):
    """``rtimer.RemotingClient`` (tests/fronts/java) on the unmodified Java 4.9.8 client."""

    BATCH = True

    LOG_ROOT = Path(tempfile.mkdtemp(prefix="rtimer-java-logs-"))

    def __init__(self, *args: str):
        classpath = f"{JAVA_CLASSES}:{JAVA_CLASSPATH.read_text().strip()}"
        super().__init__(["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-Xmx256m",
                          f"-Drocketmq.client.logRoot={self.LOG_ROOT}", "-cp", classpath,
                          "rtimer.RemotingClient", *args])
        self.next("ready", 60)

    @classmethod
    def producer(cls, namesrv: str, group: str = "rtimer-test-producer") -> "JavaClient":
        return cls("send", namesrv, group)

    @classmethod
    def consumer(cls, namesrv: str, group: str, topic: str, expression: str = "*"
                 ) -> "JavaClient":
        return cls("consume", namesrv, group, topic, expression)

    def send(self, doc: dict, timeout_s: float = 30.0) -> dict:
        self.write(doc)
        return self.next("sent", timeout_s)


def now_ms() -> int:
    return int(time.time() * 1000)


def need_python4() -> None:
    need(PY4.exists() and (ROOT / ".venv-rocketmq4" / ".installed").exists(),
         "PyPI rocketmq 0.4.4 (.venv-rocketmq4)")


class Python4Client(LineClient):
    """tests/fronts/python4/client.py on the unmodified PyPI ``rocketmq`` 0.4.4 client."""

    HOME = Path(tempfile.mkdtemp(prefix="rtimer-rocketmq4-home-"))  # the core logs under HOME
    BATCH = True

    def __init__(self, *args: str):
        super().__init__([str(PY4), str(ROOT / "tests" / "fronts" / "python4" / "client.py"),
                          *args], env=dict(os.environ, HOME=str(self.HOME)))
        self.next("ready", 60)

    @classmethod
    def producer(cls, namesrv: str, group: str = "rtimer-test-producer") -> "Python4Client":
        return cls("send", namesrv, group)

    @classmethod
    def consumer(cls, namesrv: str, group: str, topic: str, expression: str = "*"
                 ) -> "Python4Client":
        return cls("consume", namesrv, group, topic, expression)

    def send(self, doc: dict, timeout_s: float = 30.0) -> dict:
        self.write(doc)
        return self.next("sent", timeout_s)


def need_js() -> None:
    need(shutil.which("node") is not None and (JS_DIR / "node_modules" / ".installed").exists(),
         "npm ali-ons (tests/fronts/js)")


class NodeClient(LineClient):
    """tests/fronts/js/client.js on the unmodified npm ``ali-ons`` client (no batch sends)."""

    BATCH = False

    def __init__(self, *args: str):
        super().__init__(["node", str(JS_DIR / "client.js"), *args], cwd=JS_DIR)
        self.next("ready", 60)

    @classmethod
    def producer(cls, namesrv: str, group: str = "rtimer-test-producer") -> "NodeClient":
        return cls("send", namesrv, group)

    @classmethod
    def consumer(cls, namesrv: str, group: str, topic: str, expression: str = "*"
                 ) -> "NodeClient":
        return cls("consume", namesrv, group, topic, expression)

    def send(self, doc: dict, timeout_s: float = 30.0) -> dict:
        self.write(doc)
        return self.next("sent", timeout_s)


CLIENTS = {"java": (need_java, JavaClient), "python4": (need_python4, Python4Client),
           "ali-ons": (need_js, NodeClient)}


def need_namesrv() -> None:
    """The real NameServer comes from issue 29's harness (``make rocketmq``)."""
    from bench.rocketmq.cluster import unavailable_reason
    reason = unavailable_reason()
    need(reason is None, f"the Apache RocketMQ NameServer ({reason})")


class NameServer:
    """The real Apache RocketMQ NameServer (``NamesrvStartup``, the jars of ``make rocketmq``)
    on a free loopback port, with its own logback file (the classpath holds every RocketMQ jar,
    each with its own)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> "NameServer":
        import zipfile
        from bench.rocketmq.cluster import classpath
        cp = classpath()
        self.root.mkdir(parents=True, exist_ok=True)
        conf = self.root / "namesrv.conf"
        conf.write_text(f"listenPort={self.port}\n")
        logback = self.root / "rmq.namesrv.logback.xml"
        jar = next(j for j in cp.split(os.pathsep) if Path(j).name.startswith("rocketmq-namesrv-"))
        with zipfile.ZipFile(jar) as archive:
            logback.write_bytes(archive.read("rmq.namesrv.logback.xml"))
        env = dict(os.environ, ROCKETMQ_HOME=str(self.root))
        self.log = open(self.root / "namesrv.out", "wb")
        self.proc = subprocess.Popen(
            ["java", "-Xms128m", "-Xmx256m", "-XX:TieredStopAtLevel=1",
             f"-Duser.home={self.root}", f"-Drocketmq.home.dir={self.root}",
             f"-Drmq.logback.configurationFile={logback}", "-cp", cp,
             "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", str(conf)],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=self.root)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.root / "namesrv.out").read_text()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.2)
        raise AssertionError("the NameServer did not start:\n" +
                             (self.root / "namesrv.out").read_text())

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def route(self, topic: str) -> dict | None:
        """GET_ROUTEINFO_BY_TOPIC as a client asks it (None: TOPIC_NOT_EXIST)."""
        from bench.rocketmq.cluster import namesrv_route
        return namesrv_route(self.address, topic)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

