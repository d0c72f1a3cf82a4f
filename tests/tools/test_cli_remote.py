"""``rtimer run`` as a real process, and the other commands reaching it over its Unix socket."""
from __future__ import annotations

import json
import os
import queue
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cli.remote import BrokerSocketServer
from rocks_timer import Broker, BrokerConfig

RTIMER = [sys.executable, "-m", "cli.main"]
ROOT = Path(__file__).resolve().parents[2]


def rtimer(data: Path, *args: str, check: int | None = 0) -> subprocess.CompletedProcess:
    done = subprocess.run([*RTIMER, "--data-dir", str(data), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    if check is not None:
        assert done.returncode == check, (done.stdout, done.stderr)
    return done


def rtimer_json(data: Path, *args: str):
    return json.loads(rtimer(data, *args, "--json").stdout)


def start_broker(data: Path) -> subprocess.Popen:
    proc = subprocess.Popen([*RTIMER, "--data-dir", str(data), "run", "--remoting-listen",
                             "off"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert "broker running" in line, (line, proc.poll())
    assert (data / "rtimer.sock").exists()
    return proc


def stop_broker(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    return out


def assert_one_line_error(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture
def data(tmp_path) -> Path:
    return tmp_path / "data"


def test_commands_reach_the_running_broker(data):
    far = rtimer_json(data, "send", "orders", "parked", "--delay", "1h")[0]
    direct_scan = rtimer(data, "scan").stdout
    direct_json = rtimer(data, "scan", "--json").stdout
    proc = start_broker(data)
    try:
        mode = stat.S_IMODE(os.stat(data / "rtimer.sock").st_mode)
        assert mode == 0o600
        # identical output on both paths
        assert rtimer(data, "scan").stdout == direct_scan
        assert rtimer(data, "scan", "--json").stdout == direct_json
        [soon] = rtimer_json(data, "send", "orders", "soon", "--delay", "300ms", "--key", "k")
        assert soon["route"] == "rocksdb"
        figures = rtimer_json(data, "stats")
        assert figures["sent"]["timer"] == 1  # counted by the running broker: the remote path
        assert figures["pending_by_topic"]["orders"] >= 1
        deadline = time.monotonic() + 10
        got = []
        while time.monotonic() < deadline and not got:  # the running broker delivers it
            got = rtimer_json(data, "consume", "orders")
            time.sleep(0.1)
        assert [m["msg_id"] for m in got] == [soon["msg_id"]] and got[0]["body"] == "soon"
        assert got[0]["store_ms"] >= soon["deliver_at_ms"]
        assert rtimer_json(data, "consume", "orders") == []
        done = rtimer(data, "cancel", soon["handle"], far["handle"], check=1)
        assert done.stdout.splitlines() == [f"{soon['handle']}: not found or already delivered",
                                            f"{far['handle']}: cancelled"]
        assert_one_line_error(rtimer(data, "cancel", "garbage!", check=None), "garbage!")
        assert_one_line_error(rtimer(data, "send", "orders", "x", "--delay", "5000d", check=None),
                              "maximum")
        assert rtimer_json(data, "compact")["compacted"] is True
        second = rtimer(data, "run", check=None)
        assert_one_line_error(second, f"in use by pid {proc.pid}")
    finally:
        out = stop_broker(proc)
    assert "stopped cleanly" in out
    assert not (data / "rtimer.sock").exists()
    assert rtimer_json(data, "scan") == []  # the cancel held across the restart


def test_stale_socket_after_kill_9_is_ignored_and_replaced(data):
    rtimer(data, "send", "orders", "x", "--delay", "1h")
    proc = start_broker(data)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert (data / "rtimer.sock").exists()  # left behind, nobody listening
    assert len(rtimer_json(data, "scan")) == 1  # direct path
    proc = start_broker(data)
    try:
        assert len(rtimer_json(data, "scan")) == 1  # through the new socket
    finally:
        stop_broker(proc)
    assert not (data / "rtimer.sock").exists()


def test_locked_without_socket_names_the_holder(data):
    # the holder never lets go, so the default --lock-wait (5 s) would only delay the same
    # error; the wait itself is tested in test_cli_edges.py (a command waits for the data dir)
    with Broker.open(data, BrokerConfig()):
        done = rtimer(data, "--lock-wait", "0.2", "scan", check=None)
    assert_one_line_error(done, f"in use by pid {os.getpid()}", "waited 0.2 s")
    assert "RocksDB" not in done.stderr and "LOCK" not in done.stderr


def _line_reader(stream) -> "queue.Queue[str]":
    """Lines of ``stream`` on a queue, so the test waits for each with a deadline."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("inherited", ["default", "sigint-ignored"])
def test_follow_prints_messages_as_they_arrive(data, inherited):
    """The follower stops on SIGINT even when it started with SIGINT ignored (a background
    job of a non-interactive shell: Python then installs no KeyboardInterrupt handler, which
    is what once made this test time out in a full run)."""
    rtimer(data, "send", "news", "first")
    proc = subprocess.Popen([*RTIMER, "--data-dir", str(data), "consume", "news", "--follow",
                             "--json"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True,
                            preexec_fn=_ignore_sigint if inherited == "sigint-ignored" else None)
    lines = _line_reader(proc.stdout)
    try:
        assert json.loads(lines.get(timeout=60))["body"] == "first"
        assert (data / "rtimer.sock").exists()  # it serves the socket before it prints
        rtimer(data, "send", "news", "second", "--delay", "200ms")  # served by the follower
        assert json.loads(lines.get(timeout=60))["body"] == "second"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            err = proc.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # rtimer prints every thread's stack, then goes on
            time.sleep(1)
            proc.kill()
            stacks = proc.communicate()[1]
            pytest.fail(f"the follower did not stop within 30 s of SIGINT; its threads:\n{stacks}")
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert not (data / "rtimer.sock").exists()



def test_sigusr1_prints_every_thread_and_the_broker_goes_on(data):
    """``kill -USR1`` asks a running broker where each of its threads is (stderr), as jstack
    asks a Java one; the broker keeps serving and stops cleanly afterwards."""
    proc = start_broker(data)
    try:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
        assert "pending" in rtimer_json(data, "stats")  # still serving
    finally:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=30)[1]
    assert proc.returncode == 0, err
    assert err.count("(most recent call first):") >= 3  # the main thread and the services'
    assert 'File "' in err and "Traceback" not in err


def test_protocol_is_json_lines_with_typed_errors(tmp_path):
    data = tmp_path / "d"
    with Broker.open(data, BrokerConfig()) as broker, \
            BrokerSocketServer(broker, data) as server:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(server.path))
        stream = sock.makefile("rwb")
        stream.write(b'{"op": "scan", "args": {"limit": 5}}\n{"op": "nope"}\n'
                     b'{"op": "cancel", "args": {"handles": ["x!"]}}\nnot json\n')
        stream.flush()
        replies = [json.loads(stream.readline()) for _ in range(4)]
        sock.close()
    assert replies[0] == {"ok": True, "result": {"entries": [], "more": False}}
    assert replies[1]["ok"] is False and "unknown op 'nope'" in replies[1]["error"]["message"]
    assert replies[2]["error"]["type"] == "InvalidHandleError"
    assert replies[3]["ok"] is False and replies[3]["error"]["type"] == "JSONDecodeError"
    assert not (data / "rtimer.sock").exists()
