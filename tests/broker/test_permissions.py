"""ARCHITECTURE §4: a data dir and everything the broker creates in it are owner-only."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cli import ops
from rocks_timer import Broker, BrokerConfig, Message
from rocks_timer.private import hold_owner_only_umask, release_owner_only_umask

from tests.support.engine_helpers import DURABLE_ENGINES, drive, engine_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def open_umask():
    """Run with the usual 022 umask, as a user's shell would, and put the old one back."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def modes(root: Path) -> dict[str, int]:
    """Permission bits of the data dir and of every entry under it (relative names)."""
    out = {".": stat.S_IMODE(os.lstat(root).st_mode)}
    for directory, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(directory, name)
            out[str(path.relative_to(root))] = stat.S_IMODE(os.lstat(path).st_mode)
    return out


def assert_owner_only(root: Path) -> None:
    found = modes(root)
    wrong = {name: oct(mode) for name, mode in found.items()
             if mode != (0o700 if (root / name).is_dir() else 0o600)}
    assert not wrong, wrong
    assert len(found) > 5  # the walk saw the broker's files, not an empty dir


@pytest.mark.parametrize("engine", DURABLE_ENGINES)
def test_everything_a_broker_creates_is_owner_only(tmp_path, clock, open_umask, engine):
    data = tmp_path / "parent" / "data"
    config = BrokerConfig(**engine_settings(engine)).validate()
    with Broker.open(data, config, clock=clock) as broker:
        broker.send(Message(topic="orders", body=b"x" * 300), delay_ms=1_000)
        broker.send(Message(topic="orders", body=b"later"), delay_ms=3_600_000)
        broker.send(Message(topic="orders", body=b"level"), delay_level=1)
        broker.send(Message(topic="orders", body=b"now"))
        drive(broker, clock, clock.now_ms() + 2_000)
        assert len(ops.consume(broker, data, topic="orders", group="g")["messages"]) == 3
        broker.levels.persist()
        if hasattr(broker.timer, "flush"):
            broker.timer.flush()
    assert os.umask(0o022) == 0o022  # the broker gave the process umask back
    assert_owner_only(data)
    assert stat.S_IMODE(os.stat(data.parent).st_mode) == 0o700  # a parent it had to create


def test_umask_is_held_while_any_broker_is_open(tmp_path, open_umask):
    first = Broker.open(tmp_path / "a", BrokerConfig(timer_engine="memory"))
    second = Broker.open(tmp_path / "b", BrokerConfig(timer_engine="memory"))
    first.close()
    assert os.umask(0o022) & 0o077 == 0o077  # the second broker still holds it
    os.umask(0o077 | 0o022)
    second.close()
    assert os.umask(0o022) == 0o022
    hold_owner_only_umask()
    release_owner_only_umask()
    release_owner_only_umask()  # an extra release changes nothing
    assert os.umask(0o022) == 0o022


def test_opening_tightens_an_older_data_dir(tmp_path, open_umask):
    data = tmp_path / "data"
    with Broker.open(data, BrokerConfig()) as broker:
        broker.send(Message(topic="t", body=b"b"), delay_ms=60_000)
    for path in [data, *data.rglob("*")]:  # as an older version left it
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    with Broker.open(data, BrokerConfig()) as broker:
        assert broker.stats()["pending"] == 1
    assert_owner_only(data)


def test_cli_data_dir_is_owner_only(tmp_path, open_umask):
    data = tmp_path / "cli-data"
    done = subprocess.run([sys.executable, "-m", "cli.main", "--data-dir", str(data), "send",
                           "orders", "hello", "--delay", "1h"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert_owner_only(data)


def test_a_directory_of_other_files_is_not_walked(tmp_path, open_umask):
    """``--data-dir ~`` by mistake must not chmod the user's own files nor the directory: only
    what rtimer keeps there is made owner-only."""
    data = tmp_path / "home"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    (data / "notes.txt").write_text("mine")
    script = data / "run.sh"
    script.write_text("#!/bin/sh\n")
    os.chmod(script, 0o755)
    with Broker.open(data, BrokerConfig()) as broker:
        broker.send(Message(topic="t", body=b"b"), delay_ms=60_000)
    assert stat.S_IMODE(os.stat(data / "notes.txt").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(script).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o755
    for name in ("broker.lock", "commitlog", "timer-rocksdb", "config"):
        found = modes(data / name) if (data / name).is_dir() else {
            ".": stat.S_IMODE(os.stat(data / name).st_mode)}
        wrong = {k: oct(v) for k, v in found.items()
                 if v != (0o700 if (data / name / k).is_dir() else 0o600)}
        assert not wrong, (name, wrong)
    with Broker.open(data, BrokerConfig()):  # opened again: still the user's files
        pass
    assert stat.S_IMODE(os.stat(data / "notes.txt").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(script).st_mode) == 0o755
