"""Helpers of the fault matrix (tests/faults/test_fault_matrix.py): a seeded data dir with small
files, reopening it, what a consumer still gets, and making a file unusable."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from rocks_timer import Broker, BrokerConfig, ManualClock, Message

from tests.support.engine_helpers import START_MS

SEGMENT = 96 * 1024
N = 60
PENDING = 5
HOUR = 3_600_000


def config(engine: str = "rocksdb") -> BrokerConfig:
    return BrokerConfig(timer_engine=engine, commitlog_segment_size=SEGMENT,
                        max_message_size=64 * 1024, consume_queue_entries_per_file=16,
                        rocksdb_layout="vlog", vlog_inline_max_bytes=0)


def seed(path: Path, engine: str = "rocksdb") -> dict:
    """60 messages of ~4 KB on orders (three CommitLog segments), 5 pending timer messages, a
    level message, a consumer group at offset 10. Returns where things landed."""
    clock = ManualClock(START_MS)
    with Broker.open(path, config(engine), clock=clock) as broker:
        results = broker.send_batch([Message("orders", b"m%03d" % i + bytes(4000))
                                     for i in range(N)])
        for i in range(PENDING):
            broker.send(Message("later", b"t%d" % i + bytes(600)), delay_ms=HOUR + i)
        broker.send(Message("levelled", b"lv"), delay_level=3)
        broker.tick()
        broker.consumer_offsets.commit("orders", "g", 0, 10)
        offsets = [broker.pull("orders", 0, i, 1)[0].commitlog_offset for i in range(N)]
        assert broker.check().ok
    return {"offsets": offsets, "results": results}


def reopen(path: Path, engine: str = "rocksdb") -> Broker:
    return Broker.open(path, config(engine), clock=ManualClock(START_MS))


def kept(broker: Broker) -> list[int]:
    """Indexes of the orders messages a consumer gets, walking the whole queue."""
    got, offset = [], 0
    while True:
        messages, nxt = broker.messages.pull_page("orders", 0, offset, 7)
        got += [int(m.body[1:4]) for m in messages]
        if nxt == offset:
            return got
        offset = nxt


def rtimer_check(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--data-dir", str(path), "check"], catch_exceptions=False)
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def segment(path: Path, n: int) -> Path:
    return path / "commitlog" / f"{n * SEGMENT:020d}"


def flip(file: Path, at: int) -> None:
    data = bytearray(file.read_bytes())
    data[at] ^= 0x5A
    file.write_bytes(bytes(data))


def cq_file(path: Path, n: int) -> Path:
    return path / "consumequeue" / "orders" / "0" / f"{n * 16 * 20:020d}"


class Denied:
    """Make a file unusable by this process: mode 000, or, for root (whom modes do not stop),
    the immutable attribute, which refuses opening it for writing."""

    def __init__(self, file: Path):
        self.file = file

    def __enter__(self):
        if os.geteuid() == 0:
            done = subprocess.run(["chattr", "+i", str(self.file)], capture_output=True)
            if done.returncode != 0:
                if os.environ.get("CI") == "true":
                    pytest.fail(f"chattr +i failed: {done.stderr!r}")
                pytest.skip("running as root on a file system without chattr +i")
        else:
            self.file.chmod(0)
        return self

    def __exit__(self, *exc):
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(self.file)], check=True)
        else:
            self.file.chmod(0o600)


def wheel_pending(broker: Broker) -> list[bytes]:
    """Deliver every pending timer message (an hour on) and return the bodies' prefixes."""
    clock = broker.clock
    clock.set(START_MS + 2 * HOUR)
    for _ in range(30):
        broker.tick()
    return sorted({m.body[:2] for m in broker.pull("later", 0, 0, 100)})


ALL_LATER = [b"t%d" % i for i in range(PENDING)]


def vlog_files(path: Path) -> list[Path]:
    return sorted((path / "timer-rocksdb" / "vlog").glob("*.vlog"))


def delivered_later(broker: Broker) -> list[bytes]:
    broker.clock.set(START_MS + 2 * HOUR)
    for _ in range(10):
        broker.tick()
    return sorted(m.body[:2] for m in broker.pull("later", 0, 0, 100))
