"""End-to-end helpers: ``rtimer run --grpc-listen 127.0.0.1:0`` in a real subprocess, and the
unmodified official RocketMQ client (rocketmq-python-client, pinned in the dev extra).

Importing the client creates ``~/logs/rocketmq_python``: it is imported here with HOME pointing
at a temporary directory (HOME is restored afterwards), and the tests read that log file to
check that passing flows leave no WARN/ERROR line in it.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.run_support import wait_listening

ROOT = Path(__file__).resolve().parents[2]
CLIENT_HOME = Path(tempfile.mkdtemp(prefix="rtimer-grpc-home-"))
_saved_home = os.environ.get("HOME")
os.environ["HOME"] = str(CLIENT_HOME)
try:
    import rocketmq  # noqa: E402
    from rocketmq.v5.util.misc import Misc  # noqa: E402
finally:
    if _saved_home is None:
        os.environ.pop("HOME", None)
    else:
        os.environ["HOME"] = _saved_home
Misc._Misc__LOCAL_IP = "127.0.0.1"  # the client would otherwise ask the routing table
CLIENT_LOG = CLIENT_HOME / "logs" / "rocketmq_python" / "rocketmq_client.log"
_LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


TRANSPORTS = ("native", "grpcio")  # the gRPC front's two (rtimer run --grpc-server)


class BrokerProcess:
    """One ``rtimer run`` subprocess on ``data_dir`` with the gRPC front on a free port;
    ``transport`` picks the front's transport (None: rtimer's default, auto)."""

    def __init__(self, data_dir: Path, *extra: str, transport: str | None = None):
        self.data_dir = Path(data_dir)
        self.extra = extra
        self.transport = transport
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.output: list[str] = []

    def start(self) -> "BrokerProcess":
        env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(CLIENT_HOME))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "--data-dir", str(self.data_dir), *self.extra,
             "run", "--grpc-listen", "127.0.0.1:0", "--remoting-listen", "off",
             *(("--grpc-server", self.transport) if self.transport else ())],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
        # printed once the port is bound, after the "broker running" line
        self.port = int(wait_listening(self.proc, _LISTENING, self.output).group(1))
        return self

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> str:
        """SIGTERM and wait; returns everything the broker printed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                rest, _ = self.proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rest, _ = self.proc.communicate()
            self.output.append(rest or "")
        return "".join(self.output)


def config(endpoint: str):
    return rocketmq.ClientConfiguration(endpoint, rocketmq.Credentials(), request_timeout=3)


def message(topic: str, body: bytes, tag: str | None = None, keys: str | None = None,
            properties: dict | None = None, deliver_s: int | None = None):
    msg = rocketmq.Message()
    msg.topic = topic
    msg.body = body
    if tag:
        msg.tag = tag
    if keys:
        msg.keys = keys
    for name, value in (properties or {}).items():
        msg.add_property(name, value)
    if deliver_s is not None:
        msg.delivery_timestamp = deliver_s
    return msg


def receive_until(consumer, want: int, invisible_s: int, timeout_s: float,
                  ack: bool = True) -> list:
    """Receive (long polls) until ``want`` messages came or ``timeout_s`` passed."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        for msg in consumer.receive(16, invisible_s):
            msg.received_at = time.time()
            got.append(msg)
            if ack:
                consumer.ack(msg)
    return got


def log_offset() -> int:
    return CLIENT_LOG.stat().st_size if CLIENT_LOG.exists() else 0


def bad_log_lines(since: int = 0) -> list[str]:
    """WARN/ERROR lines the client logged after byte ``since``."""
    if not CLIENT_LOG.exists():
        return []
    with open(CLIENT_LOG, "rb") as log:
        log.seek(since)
        text = log.read().decode("utf-8", "replace")
    return [line for line in text.splitlines()
            if re.search(r"\[(WARN|WARNING|ERROR|CRITICAL|FATAL)\]", line)]
