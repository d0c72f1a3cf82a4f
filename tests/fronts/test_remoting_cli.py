"""``rtimer run``'s remoting options: a port in use, a malformed address and a malformed
NameServer list are one-line errors and a non-zero exit, never a traceback; port 0 prints the
port it got."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.remoting_support import RtimerProcess

ROOT = Path(__file__).resolve().parents[2]


def run(data: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", "--data-dir", str(data), "run",
                           "--grpc-listen", "off", *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_port_zero_prints_the_port_and_answers_routes(tmp_path):
    proc = RtimerProcess(tmp_path / "data").start()
    try:
        assert proc.port > 0
        with socket.create_connection(("127.0.0.1", proc.port), timeout=10):
            pass
    finally:
        output = proc.stop()
    assert "as broker rtimer-" in output and "stopped cleanly" in output


def test_a_port_in_use_is_an_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = run(tmp_path / "data", "--remoting-listen", f"127.0.0.1:{taken.getsockname()[1]}")
    assert done.returncode == 1
    assert "remoting front cannot listen" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("args,text", [
    (("--remoting-listen", "nonsense"), "--remoting-listen 'nonsense' must be HOST:PORT"),
    (("--remoting-listen", "127.0.0.1:0", "--namesrv-addr", "bad"), "entry 'bad' must be"),
    (("--remoting-listen", "off", "--namesrv-addr", "127.0.0.1:9876"), "needs the remoting"),
    (("--remoting-listen", "127.0.0.1:0", "--broker-name", "a.b"), "--broker-name 'a.b' is"),
])
def test_malformed_options_are_one_line_errors(tmp_path, args, text):
    done = run(tmp_path / "data", *args)
    assert done.returncode != 0 and text in done.stderr and "Traceback" not in done.stderr
