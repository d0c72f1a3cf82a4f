"""The CLI's edges (issue #30): a reader that goes away (``| head``), bodies and names printed
for a terminal, bodies from a file or stdin, and the data-dir lock of a concurrent command."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli

from rocks_timer import Broker, BrokerConfig, Message
from test_cli import rt
from test_cli_remote import RTIMER, ROOT

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
