"""Start the real Apache RocketMQ (NameServer + broker + proxy in local mode) on loopback.

The jars come from the Maven cache: ``make rocketmq`` resolves ``bench/rocketmq/pom.xml`` and
writes the runtime classpath to ``bench/rocketmq/.classpath``. A :class:`RocketMQCluster` is two
JVMs: the NameServer, and ``ProxyStartup -pm local`` which builds the broker inside its own JVM
(one process to measure for broker + gRPC proxy: BENCHMARKS.md). Every port is a free loopback port,
the store is a scratch directory on a real disk, and the logs (RocketMQ's logback files and
RocksDB's info LOG, both under ``user.home``) go to a separate directory so that their bytes can
be counted apart from the store's (docs/WRITE_AMPLIFICATION.md).

Engines (docs/DECISIONS.md "Real RocketMQ"): ``wheel`` is RocketMQ's defaults (the RIP-43 file
wheel, ``timerWheelEnable=true``); ``rocksdb`` adds ``timerRocksDBEnable=true`` (RIP-82's
``TimerMessageRocksDBStore``; the wheel flag must stay true, since the broker rejects timer
messages when it is false).

    with RocketMQCluster(scratch, engine="rocksdb") as mq:
        mq.create_topic("orders", "DELAY")
        ... the official Python 5.x client on mq.grpc_endpoint ...
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLASSPATH_FILE = HERE / ".classpath"
CLUSTER_NAME = "BenchCluster"
BROKER_NAME = "broker-bench"
ENGINES = ("wheel", "rocksdb")
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")

# The settings each engine runs with. Everything not named keeps RocketMQ 5.5.1's default.
ENGINE_SETTINGS: dict[str, dict[str, str]] = {
    "wheel": {"timerWheelEnable": "true", "timerRocksDBEnable": "false"},
    "rocksdb": {"timerWheelEnable": "true", "timerRocksDBEnable": "true"},
}


class RocketMQUnavailable(RuntimeError):
    """Java or the resolved classpath is missing (run ``make rocketmq``)."""


def java_binary() -> str | None:
    return shutil.which("java")


def classpath() -> str:
    """The runtime classpath ``make rocketmq`` wrote; every jar must be in the Maven cache."""
    if not CLASSPATH_FILE.exists():
        raise RocketMQUnavailable(f"{CLASSPATH_FILE} is missing: run `make rocketmq`")
    jars = CLASSPATH_FILE.read_text().strip().split(os.pathsep)
    missing = [j for j in jars if not Path(j).exists()]
    if not jars or missing:
        raise RocketMQUnavailable(f"{len(missing)} jars of {CLASSPATH_FILE} are not in the Maven "
                                  f"cache (first: {missing[:1]}): run `make rocketmq`")
    return os.pathsep.join(jars)


def unavailable_reason() -> str | None:
    """Why the real broker cannot run here, or None when it can."""
    if java_binary() is None:
        return "java is not installed"
    try:
        classpath()
    except RocketMQUnavailable as exc:
        return str(exc)
    return None


def free_port(*offsets: int) -> int:
    """A free loopback port p such that p + each offset is free too (the broker also binds
    listenPort - 2 and listenPort + 1)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if all(_is_free(port + o) for o in offsets):
            return port
    raise RuntimeError(f"no free loopback port with offsets {offsets}")


def _is_free(port: int) -> bool:
    if not 1024 < port < 65536:
        return False
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def namesrv_route(address: str, topic: str) -> dict | None:
    """GET_ROUTEINFO_BY_TOPIC (code 105) to the NameServer at ``address``, as a client asks it:
    the route document, or None when the NameServer knows no route (TOPIC_NOT_EXIST)."""
    from rocks_timer.remoting.command import RemotingCommand, decode, frame_size

    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(RemotingCommand(105, opaque=1, ext={"topic": topic}).encode())
        head = _read_exactly(sock, 8)
        total, _ = frame_size(head)
        reply = decode(int.from_bytes(head[4:], "big"), _read_exactly(sock, total - 4))
    if reply.code != 0:
        return None
    # the NameServer writes fastjson: map keys may be bare numbers ({0:"host:port"})
    return json.loads(re.sub(rb'([{,])(\d+):', rb'\1"\2":', reply.body))


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the NameServer closed the connection")
        out += chunk
    return out


def _jar_of(cp: str, artifact: str) -> Path:
    for jar in cp.split(os.pathsep):
        if Path(jar).name.startswith(artifact + "-"):
            return Path(jar)
    raise RocketMQUnavailable(f"{artifact} is not on the classpath: run `make rocketmq`")


@dataclass
class JavaProcess:
    name: str
    proc: subprocess.Popen
    out_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.out_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class RocketMQCluster:
    """NameServer + (proxy with the broker inside, local mode) on loopback.

    ``root`` holds the store (``root/store``) and the configs; ``log_dir`` (default
    ``root/home``) is the JVMs' ``user.home``, where RocketMQ and RocksDB write their logs.
    ``broker_settings`` override broker/MessageStoreConfig keys after the engine's own;
    ``faketime`` (for instance ``"+0 x100"``) runs the broker JVM under libfaketime.
    """

    root: Path
    engine: str = "wheel"
    heap_mb: int = 512
    broker_settings: dict[str, str] = field(default_factory=dict)
    proxy_settings: dict[str, object] = field(default_factory=dict)
    log_dir: Path | None = None
    faketime: str | None = None
    start_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine {self.engine!r} is unknown; valid: {', '.join(ENGINES)}")
        self.root = Path(self.root)
        self.home = Path(self.log_dir) if self.log_dir else self.root / "home"
        self.store_dir = self.root / "store"
        self.conf_dir = self.root / "conf"
        self.namesrv_port = 0
        self.broker_port = 0
        self.grpc_port = 0
        self.proxy_remoting_port = 0
        self.namesrv: JavaProcess | None = None
        self.broker: JavaProcess | None = None
        self._cp = ""

    # -- addresses -----------------------------------------------------------------------------
    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def grpc_endpoint(self) -> str:
        """Where the official 5.x clients connect (the proxy's gRPC port)."""
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def broker_pid(self) -> int:
        """The JVM that holds the broker, its store and the proxy."""
        assert self.broker is not None, "not started"
        return self.broker.pid

    # -- life cycle ----------------------------------------------------------------------------
    def __enter__(self) -> "RocketMQCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if java_binary() is None:
            raise RocketMQUnavailable("java is not installed")
        self._cp = classpath()
        for d in (self.home, self.store_dir, self.conf_dir, self.root / "tmp"):
            d.mkdir(parents=True, exist_ok=True)
        self._extract_logback()
        try:
            self.namesrv_port = free_port()
            (self.conf_dir / "namesrv.conf").write_text(f"listenPort={self.namesrv_port}\n")
            self.namesrv = self._java("namesrv", "rmq.namesrv.logback.xml",
                                      "org.apache.rocketmq.namesrv.NamesrvStartup",
                                      ["-c", str(self.conf_dir / "namesrv.conf")], heap_mb=256)
            self._wait(lambda: _listening(self.namesrv_port), self.namesrv, "NameServer")
            self.broker_port = free_port(-2, 1)
            self.grpc_port = free_port()
            self.proxy_remoting_port = free_port()
            self._write_broker_conf()
            self._write_proxy_conf()
            self.broker = self._java(
                "broker", "rmq.proxy.logback.xml", "org.apache.rocketmq.proxy.ProxyStartup",
                ["-pm", "local", "-bc", str(self.conf_dir / "broker.conf"),
                 "-pc", str(self.conf_dir / "rmq-proxy.json"), "-n", self.namesrv_addr],
                heap_mb=self.heap_mb, faketime=self.faketime)
            self._wait(lambda: _listening(self.broker_port) and _listening(self.grpc_port),
                       self.broker, "broker + proxy")
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (RocketMQ's shutdown hooks flush and close the store), then SIGKILL."""
        for jp in (self.broker, self.namesrv):
            if jp is None or not jp.alive():
                continue
            jp.proc.send_signal(signal.SIGTERM)
            try:
                jp.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                jp.proc.kill()
                jp.proc.wait(10)

    def kill(self) -> None:
        for jp in (self.broker, self.namesrv):
            if jp is not None and jp.alive():
                jp.proc.kill()
                jp.proc.wait(10)

    # -- administration ------------------------------------------------------------------------
    def create_topic(self, topic: str, message_type: str = "DELAY", queues: int = 4) -> None:
        """``mqadmin updateTopic`` with the topic's message type (the proxy checks a DELAY
        message goes to a DELAY or MIXED topic)."""
        self.admin(topics={topic: message_type}, queues=queues)

    def create_group(self, group: str) -> None:
        """``mqadmin updateSubGroup``: the proxy refuses a consumer whose group is unknown."""
        self.admin(groups=(group,))

    def admin(self, topics: dict[str, str] | None = None, groups: tuple[str, ...] = (),
              queues: int = 4) -> None:
        """Create ``topics`` ({name: message type}) and consumer ``groups``, one mqadmin JVM
        each, all at once; each is retried until the broker has registered."""
        commands = [["updateTopic", "-n", self.namesrv_addr, "-b", self.broker_addr, "-t", t,
                     "-r", str(queues), "-w", str(queues), "-a", f"+message.type={kind}"]
                    for t, kind in (topics or {}).items()]
        commands += [["updateSubGroup", "-n", self.namesrv_addr, "-b", self.broker_addr,
                      "-g", g] for g in groups]
        deadline = time.monotonic() + 60
        while commands:
            procs = [(c, subprocess.Popen(
                self._java_cmd("rmq.tools.logback.xml",
                               "org.apache.rocketmq.tools.command.MQAdminStartup", c, 128),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self._env()))
                for c in commands]
            failed = []
            for command, proc in procs:
                out, _ = proc.communicate(timeout=120)
                if proc.returncode != 0 or "success" not in out:
                    failed.append((command, out))
            if failed and time.monotonic() > deadline:
                raise RuntimeError(f"mqadmin {failed[0][0]} failed:\n{failed[0][1]}")
            commands = [c for c, _ in failed]
            if commands:
                time.sleep(1)
        # updateTopic answers once the broker has the topic; the broker tells the NameServer
        # afterwards, so a client asking for the route at once can still be told "no route".
        for topic in topics or {}:
            self._await_route(topic, deadline)

    def _await_route(self, topic: str, deadline: float) -> None:
        # asked the way a client asks (one request on a socket), not with `mqadmin topicRoute`:
        # each mqadmin is a JVM start of ~6 s, and the first ask often came too early
        while True:
            route = namesrv_route(self.namesrv_addr, topic)
            if route is not None and any(b.get("brokerName") == BROKER_NAME
                                         for b in route.get("brokerDatas", ())):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"no route for {topic} at the NameServer: {route}")
            time.sleep(0.1)

    # -- internals -----------------------------------------------------------------------------
    def _extract_logback(self) -> None:
        """Each process gets its logback file explicitly: with one classpath holding every jar,
        logback would otherwise take the first rmq.*.logback.xml resource it finds."""
        for artifact, name in (("rocketmq-namesrv", "rmq.namesrv.logback.xml"),
                               ("rocketmq-proxy", "rmq.proxy.logback.xml"),
                               ("rocketmq-broker", "rmq.broker.logback.xml"),
                               ("rocketmq-tools", "rmq.tools.logback.xml")):
            target = self.conf_dir / name
            if not target.exists():
                with zipfile.ZipFile(_jar_of(self._cp, artifact)) as jar:
                    target.write_bytes(jar.read(name))

    def _write_broker_conf(self) -> None:
        settings = {
            "brokerClusterName": CLUSTER_NAME,
            "brokerName": BROKER_NAME,
            "brokerId": "0",
            "brokerRole": "ASYNC_MASTER",
            "flushDiskType": "ASYNC_FLUSH",
            "namesrvAddr": self.namesrv_addr,
            "brokerIP1": "127.0.0.1",
            "listenPort": str(self.broker_port),
            "haListenPort": str(self.broker_port + 1),
            "storePathRootDir": str(self.store_dir),
            "autoCreateTopicEnable": "false",
            **ENGINE_SETTINGS[self.engine],
            **self.broker_settings,
        }
        (self.conf_dir / "broker.conf").write_text(
            "".join(f"{k}={v}\n" for k, v in settings.items()))

    def _write_proxy_conf(self) -> None:
        config = {
            "rocketMQClusterName": CLUSTER_NAME,
            "namesrvAddr": self.namesrv_addr,
            "grpcServerPort": self.grpc_port,
            "remotingListenPort": self.proxy_remoting_port,
            # the proxy's default refuses gRPC sends due more than one day ahead
            "maxDelayTimeMills": 40 * 86_400_000,
            "enableTopicMessageTypeCheck": True,
            **self.proxy_settings,
        }
        (self.conf_dir / "rmq-proxy.json").write_text(json.dumps(config))

    def _env(self, faketime: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKETIME", "LD_PRE"))}
        env["ROCKETMQ_HOME"] = str(self.conf_dir.parent)
        if faketime:
            if not FAKETIME_LIB.exists():
                raise RocketMQUnavailable(f"{FAKETIME_LIB} is missing: run `make faketime`")
            # the JVM hangs when its monotonic clock is faked (libfaketime's README)
            env.update(LD_PRELOAD=str(FAKETIME_LIB), FAKETIME=faketime,
                       FAKETIME_DONT_FAKE_MONOTONIC="1", FAKETIME_NO_CACHE="0")
        return env

    def _java_cmd(self, logback: str, main: str, args: list[str], heap_mb: int) -> list[str]:
        return [java_binary() or "java", "-server", f"-Xms{heap_mb}m", f"-Xmx{heap_mb}m",
                "-XX:MaxDirectMemorySize=1g", "-XX:+UseG1GC", "-XX:ActiveProcessorCount=2",
                "-XX:-OmitStackTraceInFastThrow", "-Xlog:disable", "-Xlog:all=warning:stderr",
                f"-Drocketmq.home.dir={self.root}",
                f"-Duser.home={self.home}", f"-Djava.io.tmpdir={self.root / 'tmp'}",
                f"-Drmq.logback.configurationFile={self.conf_dir / logback}",
                "-cp", self._cp, main, *args]

    def _java(self, name: str, logback: str, main: str, args: list[str], heap_mb: int,
              faketime: str | None = None) -> JavaProcess:
        out_path = self.root / f"{name}.out"
        out = open(out_path, "wb")
        proc = subprocess.Popen(self._java_cmd(logback, main, args, heap_mb), stdout=out,
                                stderr=subprocess.STDOUT, env=self._env(faketime),
                                cwd=self.root, start_new_session=True)
        out.close()
        return JavaProcess(name, proc, out_path)

    def _wait(self, ready, jp: JavaProcess, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if not jp.alive():
                raise RuntimeError(f"{what} exited with {jp.proc.returncode}:\n{jp.tail()}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{what} not ready after {self.start_timeout_s} s:\n{jp.tail()}")
