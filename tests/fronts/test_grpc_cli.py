"""``rtimer run --grpc-listen``: off, bad addresses, a port in use, and the best-effort default."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def run_broker(data: Path, *listen: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cli.main", "--data-dir", str(data), "run",
                             "--remoting-listen", "off", *listen], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=ENV)


def stop(proc: subprocess.Popen) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return out, err


@pytest.mark.parametrize("bad", ["nonsense", "127.0.0.1:99999", ":8081", "127.0.0.1:"])
def test_a_bad_address_is_a_one_line_error(tmp_path, bad):
    proc = run_broker(tmp_path / "data", "--grpc-listen", bad)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err.strip().splitlines() == [err.strip()] and err.startswith("Error: "), err
    assert "--grpc-listen" in err and "Traceback" not in err


def test_off_serves_no_grpc(tmp_path):
    proc = run_broker(tmp_path / "data", "--grpc-listen", "off")
    assert "broker running" in proc.stdout.readline()
    out, err = stop(proc)
    assert "gRPC" not in out + err


def test_an_explicit_port_in_use_fails(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_broker(tmp_path / "data", "--grpc-listen", f"127.0.0.1:{port}")
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, (out, err)
    assert err.startswith("Error: gRPC front cannot listen on 127.0.0.1:") and "Traceback" not in err


def test_the_default_port_in_use_is_a_warning(tmp_path):
    with socket.socket() as taken:
        try:
            taken.bind(("127.0.0.1", 8081))
            taken.listen()
        except OSError:
            pass  # someone else holds it: taken either way
        proc = run_broker(tmp_path / "data")
        assert "broker running" in proc.stdout.readline()
        out, err = stop(proc)
    assert "warning: gRPC front not started" in err and "Traceback" not in err
    assert "stopped cleanly" in out
