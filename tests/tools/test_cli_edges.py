"""The CLI's edges (issue #30): a reader that goes away (``| head``), bodies and names printed
for a terminal, bodies from a file or stdin, and the data-dir lock of a concurrent command."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli

from rocks_timer import Broker, BrokerConfig, Message
from tests.tools.test_cli import assert_one_line_error, rt
from tests.tools.test_cli_remote import RTIMER, ROOT, start_broker, stop_broker

SIGPIPE_STATUS = 141


@pytest.fixture
def data(tmp_path) -> Path:
    return tmp_path / "data"


def _fill(data: Path, n: int) -> None:
    with Broker.open(data, BrokerConfig()) as broker:
        broker.send_batch([Message("orders", b"x") for _ in range(n)], delay_ms=3_600_000)


def _first_line_then_hang_up(data: Path, *args: str) -> tuple[int, str]:
    """``rtimer ARGS | head -1``: read one line, close the pipe, wait."""
    proc = subprocess.Popen([*RTIMER, "--data-dir", str(data), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    return proc.wait(60), err


def test_a_reader_that_goes_away_ends_it_quietly_like_other_tools(data):
    _fill(data, 5_000)  # ~700 KB of lines: far more than a pipe holds
    code, err = _first_line_then_hang_up(data, "scan", "--limit", "5000")
    assert err == "" and code == SIGPIPE_STATUS
    # the data dir was closed properly: the next command opens it at once
    done = subprocess.run([*RTIMER, "--data-dir", str(data), "stats"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "5000 timer messages" in done.stdout, done.stderr


EVIL = "title\x1b]0;pwned\x07 red\x1b[31m clear\x1b[2J\rback\x08 bidi\u202eevil\nline2\x85"


def test_bodies_printed_as_text_carry_no_terminal_controls(data):
    with Broker.open(data, BrokerConfig()) as broker:
        broker.send(Message("orders", EVIL.encode(), tags="t\x1b[5m"))
    # color=True: click would otherwise strip some ANSI sequences itself (not OSC, \r, \b, bidi)
    shown = CliRunner().invoke(cli, ["--data-dir", str(data), "consume", "orders"], color=True)
    assert shown.exit_code == 0, shown.stderr
    line = shown.stdout
    assert line.count("\n") == 1 and line.endswith("\n")  # one message, one line
    assert not any(c in line[:-1] for c in "\x1b\x07\r\x08\n\x85\u202e"), repr(line)
    assert ("title\\x1b]0;pwned\\x07 red\\x1b[31m clear\\x1b[2J\\rback\\x08 bidi\\u202eevil"
            "\\nline2\\x85") in line and "tags=t\\x1b[5m" in line
    # --json stays exact
    rt(data, "consume", "orders", "--group", "other", code=0)
    as_json = CliRunner().invoke(cli, ["--data-dir", str(data), "consume", "orders", "--group",
                                       "third", "--json"])
    assert json.loads(as_json.stdout)[0]["body"] == EVIL


BINARY = bytes(range(256)) * 300  # every byte value, 76,800 bytes, not UTF-8


def test_send_body_file_and_stdin_carry_exact_bytes(data, tmp_path):
    body = tmp_path / "body.bin"
    body.write_bytes(BINARY)
    [sent] = json.loads(rt(data, "send", "bin", "--body-file", str(body), "--json").stdout)
    assert sent["route"] == "immediate"
    piped = CliRunner().invoke(cli, ["--data-dir", str(data), "send", "bin", "--body-file", "-",
                                     "--delay", "0s", "--count", "2", "--json"], input=BINARY)
    assert piped.exit_code == 0, piped.stderr
    got = json.loads(rt(data, "consume", "bin", "--json").stdout)
    assert [base64.b64decode(m["body_base64"]) for m in got] == [BINARY] * 3
    text = tmp_path / "text.txt"
    text.write_text("h\u00e9llo\n")
    rt(data, "send", "txt", "--body-file", str(text))
    [m] = json.loads(rt(data, "consume", "txt", "--json").stdout)
    assert m["body"] == "h\u00e9llo\n" and "body_base64" not in m


def test_body_file_is_bounded_by_the_max_body_size_and_stores_nothing(data, tmp_path):
    conf = tmp_path / "small.toml"
    conf.write_text("max_message_size = 1024\n")
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * 1025)
    args = ["--data-dir", str(data), "--config", str(conf), "send", "t"]
    for extra, stdin in ((["--body-file", str(big)], None), (["--body-file", "-"], b"y" * 5000),
                         (["--body-file", "/dev/zero"], None)):
        done = CliRunner().invoke(cli, [*args, *extra], input=stdin)
        assert_one_line_error(done, "max_message_size 1024", "nothing was sent")
    exact = tmp_path / "exact.bin"
    exact.write_bytes(b"z" * 1024)
    assert CliRunner().invoke(cli, [*args, "--body-file", str(exact)]).exit_code == 0
    for bad, fragment in (([], "exactly one"), (["body", "--body-file", str(exact)], "exactly one"),
                          (["--body-file", str(tmp_path / "absent")], "absent")):
        assert_one_line_error(CliRunner().invoke(cli, [*args, *bad]), fragment)
    assert len(json.loads(rt(data, "consume", "t", "--json").stdout)) == 1


def test_body_file_through_a_running_broker(data, tmp_path):
    body = tmp_path / "body.bin"
    body.write_bytes(BINARY)
    proc = start_broker(data)
    try:
        done = subprocess.run([*RTIMER, "--data-dir", str(data), "send", "bin", "--body-file",
                               "-", "--json"], cwd=ROOT, input=BINARY, capture_output=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        got = json.loads(subprocess.run([*RTIMER, "--data-dir", str(data), "consume", "bin",
                                         "--json"], cwd=ROOT, capture_output=True,
                                        timeout=60).stdout)
        assert [base64.b64decode(m["body_base64"]) for m in got] == [BINARY]
    finally:
        stop_broker(proc)


def test_a_command_waits_for_the_data_dir_another_process_holds(data):
    rt(data, "send", "orders", "x")
    holder = Broker.open(data, BrokerConfig())  # holds the lock, serves no socket
    waiting = subprocess.Popen([*RTIMER, "--data-dir", str(data), "--lock-wait", "60", "send",
                                "orders", "y", "--delay", "1h"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        refused = CliRunner().invoke(cli, ["--data-dir", str(data), "--lock-wait", "0.3",
                                           "scan"])
        assert_one_line_error(refused, "in use by pid", "waited 0.3 s", "--lock-wait")
        time.sleep(1.5)  # the command has started and is waiting (before: it gave up at 3 s)
        assert waiting.poll() is None
    finally:
        holder.close()
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert len(json.loads(rt(data, "scan", "--json").stdout)) == 1


def test_concurrent_commands_without_a_broker_all_succeed(data):
    rt(data, "send", "orders", "x")
    procs = [subprocess.Popen([*RTIMER, "--data-dir", str(data), "send", "orders", f"m{i}",
                               "--delay", "1h"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(4)]
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    assert len(json.loads(rt(data, "scan", "--json").stdout)) == 4


def test_a_body_as_large_as_the_broker_takes_reaches_a_running_broker(data, tmp_path):
    """The socket's request line grows with max_message_size: a 20 MiB body, base64 in JSON
    (27 MiB), went over the fixed 16 MiB line before."""
    conf = tmp_path / "big.toml"
    conf.write_text(f"max_message_size = {20 << 20}\n")
    body = tmp_path / "big.bin"
    big = os.urandom(20 << 20)
    body.write_bytes(big)
    rt(data, "--config", str(conf), "send", "warm", "x")  # creates the data dir
    proc = subprocess.Popen([*RTIMER, "--data-dir", str(data), "--config", str(conf), "run",
                             "--grpc-listen", "off", "--remoting-listen", "off"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "broker running" in proc.stdout.readline()
        done = subprocess.run([*RTIMER, "--data-dir", str(data), "--config", str(conf), "send",
                               "big", "--body-file", str(body)], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    finally:
        stop_broker(proc)
    with Broker.open(data, BrokerConfig(max_message_size=20 << 20)) as broker:
        [stored] = broker.pull("big")
        assert stored.body == big
