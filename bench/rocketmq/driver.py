"""What drives and measures one engine behind a RocketMQ 5 gRPC endpoint (issue #29).

The same code drives rtimer (``rtimer run --grpc-listen``) and the real broker (the proxy in local
mode): the official Python 5.x client (rocketmq-python-client, unmodified) sends the seeded
workload's messages (``bench/workloads.py``: same delays, same incompressible bodies) with
``delivery_timestamp`` in whole seconds (the client's unit) and a SimpleConsumer receives and acks
them. Process figures come from ``/proc/<pid>``: ``write_bytes`` (all threads; mmapped files are
counted when their dirty pages are written back) and ``VmHWM`` (peak RSS).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")




# -- /proc -----------------------------------------------------------------------------------------
def proc_io(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key.strip()] = int(value)
    return out


def proc_written(pid: int) -> int:
    """Bytes the process caused to be written to storage, less those it truncated or deleted
    before writeback."""
    io = proc_io(pid)
    return io["write_bytes"] - io.get("cancelled_write_bytes", 0)


def proc_status(pid: int, key: str) -> int:
    """A ``kB`` field of /proc/<pid>/status, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def disk_usage(path: Path) -> int:
    """Allocated bytes under ``path`` (st_blocks: sparse, preallocated files count what they
    hold on disk, as ``du`` does)."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def file_bytes(path: Path) -> int:
    """Apparent size of the files under ``path`` (for log files)."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:
                pass
    return total


class Sampler:
    """Samples a process's peak disk (under ``store``) and live payload every ``every_s``."""

    def __init__(self, store: Path, every_s: float = 2.0):
        self.store, self.every_s = store, every_s
        self.peak_disk = 0
        self.peak_live = 0
        self.live = lambda: 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def sample(self) -> None:
        self.peak_disk = max(self.peak_disk, disk_usage(self.store))
        self.peak_live = max(self.peak_live, self.live())

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()


# -- rtimer behind its gRPC front -------------------------------------------------------------------
@dataclass
class RtimerProcess:
    """``rtimer run --grpc-listen 127.0.0.1:0`` on ``data_dir``, in a subprocess (its own
    /proc/<pid>/io), stdout drained by a thread. ``front="remoting"`` serves the RocketMQ 4.x
    remoting front instead (``--remoting-listen``; its port is also the NameServer's)."""

    data_dir: Path
    home: Path
    config_lines: dict[str, object] = field(default_factory=dict)
    front: str = "grpc"
    proc: subprocess.Popen | None = None
    port: int = 0
    output: list[str] = field(default_factory=list)

    def start(self) -> "RtimerProcess":
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "cli.main", "--data-dir", str(self.data_dir)]
        if self.config_lines:
            conf = self.data_dir.parent / (self.data_dir.name + ".toml")
            conf.write_text("".join(f"{k} = {_toml(v)}\n" for k, v in self.config_lines.items()))
            args += ["--config", str(conf)]
        env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(self.home))
        listen = (["--grpc-listen", "127.0.0.1:0"] if self.front == "grpc" else
                  ["--grpc-listen", "off", "--remoting-listen", "127.0.0.1:0"])
        self.proc = subprocess.Popen(args + ["run", *listen],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=env, cwd=ROOT)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.output.append(line)
            match = _LISTENING.search(line)
            if match:
                self.port = int(match.group(1))
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        self.stop()
        raise RuntimeError("rtimer run did not start:\n" + "".join(self.output[-20:]))

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            del self.output[:-200]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return '"' + str(value) + '"'


# -- the client side ---------------------------------------------------------------------------------
@dataclass
class Received:
    receive_ms: float  # wall clock when the consumer had it
    due_ms: int  # the delivery_timestamp it was sent with
    store_ms: int  # the broker's store timestamp of the delivered copy


class GrpcDriver:
    """One producer and ``consumers`` SimpleConsumers of one group on ``topics``."""

    def __init__(self, mq, endpoint: str, topics: tuple[str, ...], group: str,
                 consumers: int = 2):
        self.mq = mq
        self.config = mq.ClientConfiguration(endpoint, mq.Credentials(), request_timeout=30)
        self.topics = topics
        self.producer = mq.Producer(self.config, topics)
        subs = {t: mq.FilterExpression() for t in topics}
        self.consumers = [mq.SimpleConsumer(self.config, group, subs, await_duration=5)
                          for _ in range(consumers)]

    def __enter__(self) -> "GrpcDriver":
        # a topic just created reaches the proxy's route cache a moment later
        deadline = time.monotonic() + 60
        while True:
            try:
                self.producer.startup()
                break
            except Exception:  # noqa: BLE001 - "failed to fetch topic route", retried
                if time.monotonic() > deadline:
                    raise
                self.producer = self.mq.Producer(self.config, self.topics)
                time.sleep(1)
        for c in self.consumers:
            c.startup()
        return self

    def __exit__(self, *exc) -> None:
        for c in self.consumers:
            c.shutdown()
        self.producer.shutdown()

    def send(self, items, window: int = 100) -> tuple[int, float, int]:
        """Send ``(topic, body, due_s)`` items, ``window`` in flight (send_async; rtimer's front
        refuses more than 128 calls at once on one connection); returns (sent,
        seconds, payload bytes). Payload = body + topic (no user properties are set)."""
        mq = self.mq
        pending: list = []
        sent = payload = 0
        started = time.perf_counter()
        for topic, body, due_s in items:
            msg = mq.Message()
            msg.topic, msg.body = topic, body
            msg.delivery_timestamp = due_s
            pending.append(self.producer.send_async(msg))
            payload += len(body) + len(topic.encode())
            sent += 1
            if len(pending) >= window:
                for fut in pending[: window // 2]:
                    fut.result(120)
                del pending[: window // 2]
        for fut in pending:
            fut.result(120)
        return sent, time.perf_counter() - started, payload

    def consume(self, expected: int, deadline_s: float, on_progress=None) -> list[Received]:
        """Receive (batches of 32) and ack until ``expected`` messages or the deadline; each
        consumer on its own thread, acks on a small pool off the receiving thread."""
        got: list[Received] = []
        lock = threading.Lock()
        done = threading.Event()
        acks = ThreadPoolExecutor(4)
        deadline = time.monotonic() + deadline_s

        def run(consumer) -> None:
            while not done.is_set() and time.monotonic() < deadline:
                try:
                    batch = consumer.receive(32, 60)
                except Exception:  # noqa: BLE001 - a long-poll timeout or a transient error
                    time.sleep(0.05)
                    continue
                now_ms = time.time() * 1000
                if not batch:
                    continue
                acks.submit(_ack_all, consumer, batch)
                with lock:
                    got.extend(Received(now_ms, m.delivery_timestamp or 0, store_ms(m))
                               for m in batch)
                    if on_progress is not None:
                        on_progress(len(got))
                    if len(got) >= expected:
                        done.set()

        threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in self.consumers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        acks.shutdown(wait=True)
        return got


def store_ms(message) -> int:
    """The delivered copy's store timestamp (system property ``store_timestamp``): client 5.1.2
    decodes it but has no accessor for it, so it is read from the decoded field."""
    return int(getattr(message, "_Message__store_timestamp", None) or 0)


def _ack_all(consumer, batch) -> None:
    for msg in batch:
        try:
            consumer.ack(msg)
        except Exception:  # noqa: BLE001 - an ack lost to an invisibility timeout redelivers
            pass
