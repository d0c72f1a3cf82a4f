"""Helpers and fixtures shared by the RocksTimerStore tests."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from rocksdict import Options, Rdict, WriteBatch

from rocks_timer.clock import ManualClock
from rocks_timer.config import BrokerConfig
from rocks_timer.message import Message
from rocks_timer.timer.rocksdb import RocksTimerStore
from rocks_timer.timer.store import TimerRecord

ROOT = Path(__file__).resolve().parents[2]
BIG = 1 << 30
T0 = 1_700_000_000_000


def msg(i: int, topic: str = "orders", body: bytes = b"payload", **kw) -> Message:
    return Message(topic=topic, body=body, msg_id=f"{i:032X}", queue_id=i % 4, tags=f"T{i % 3}",
                   **kw)


def rec(i: int, due_ms: int, **kw) -> TimerRecord:
    return TimerRecord(due_ms, msg(i, **kw))


def ids(records) -> list[str]:
    return [r.key.msg_id for r in records]


@pytest.fixture
def clock():
    return ManualClock(T0)


LAYOUTS = ("inline", "vlog")


@pytest.fixture(params=LAYOUTS)
def layout(request):
    """Every RocksTimerStore test runs on both layouts (ARCHITECTURE §8)."""
    return request.param


@pytest.fixture
def open_store(tmp_path, layout):
    opened = []

    def _open(config: BrokerConfig | None = None, path: Path | None = None, **kw):
        config = config or BrokerConfig()
        if config.rocksdb_layout == BrokerConfig().rocksdb_layout:
            config = dataclasses.replace(config, rocksdb_layout=layout)
        store = RocksTimerStore.open(path or tmp_path / "timer", config, **kw)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


def raw_timer_put(path: Path, key: bytes, value: bytes) -> None:
    """Write straight into the timer column family, as a corrupting disk or bug would."""
    cfs = {name: Options(raw_mode=True) for name in ("timer", "meta", "corrupt")}
    db = Rdict(str(path), Options(raw_mode=True), column_families=cfs)
    handle = db.get_column_family_handle("timer")
    batch = WriteBatch(raw_mode=True)
    batch.put(key, value, handle)
    db.write(batch)
    del handle
    db.close()


def count_taken(monkeypatch, owner, name: str) -> list[int]:
    """Wrap ``owner.name``, a single-record fast path that returns how many records it wrote
    (0: it left them to the batch path), so that the one-item list returned adds up its answers
    (``monkeypatch.undo()`` puts the original back)."""
    taken = [0]
    original = getattr(owner, name)

    def counting(*args):
        done = original(*args)
        taken[0] += done
        return done

    monkeypatch.setattr(owner, name, counting)
    return taken
