"""The single-cancel path of the RocksDB timer store (``Writer.cancel_one``, rocksdb/transaction.py:
a pop's ack, a recall) writes exactly what the batch path (``Transaction.remove_stored``)
writes for the same cancel: every column family and every value segment, byte for byte, and
the same answers and counts, on both layouts, through cancels that empty counters, cancels of
keys gone already, and a store that starts indexing KEYS (the single path then steps aside)."""
from __future__ import annotations

import random

import pytest

from rocks_timer import BrokerConfig
from rocks_timer.timer.rocksdb import RocksTimerStore
from rocks_timer.timer.rocksdb.transaction import Writer
from tests.engines.rocksdb.test_schedule_single import contents
from tests.support.rocks_support import T0, count_taken, rec


def steps(seed: int) -> list[tuple[str, object]]:
    """Schedules (one at a time and in batches; 1 KiB bodies that go to value segments in
    ``vlog`` and small ones kept inline; several due seconds, hours and days) and cancels of
    what they stored, in a seeded order; then KEYS enter the store and cancels go on."""
    rng = random.Random(seed)
    out: list[tuple[str, object]] = []
    n = 0
    for phase_keys in (False, True):
        for _ in range(120):
            if rng.random() < 0.45:
                batch = []
                for _ in range(rng.choice((1, 1, 3))):
                    due = T0 + rng.choice((1_000, 1_500, 3_600_000, 86_400_000 * 2)) + n % 3
                    body = rng.randbytes(1024) if rng.random() < 0.7 else b"small"
                    keys = (f"k{n % 5}",) if phase_keys and rng.random() < 0.5 else ()
                    batch.append(rec(n, due, body=body, keys=keys))
                    n += 1
                out.append(("schedule", batch))
            else:
                out.append(("cancel", rng.random()))
    return out


def run(store: RocksTimerStore, plan: list[tuple[str, object]]) -> list:
    handles: list[str] = []
    answers = []
    for kind, arg in plan:
        if kind == "schedule":
            handles.extend(s.handle for s in store.schedule(arg, T0))
        elif handles:
            # mostly a stored key; sometimes one cancelled already (False, nothing written)
            handle = handles[int(arg * len(handles))]
            answers.append(store.cancel(handle, T0))
    stats = store.stats()
    return answers + [stats.pending, store.count_by_topic()]


@pytest.mark.parametrize("layout", ["vlog", "inline"])
def test_the_single_cancel_writes_what_the_batch_path_writes(tmp_path, monkeypatch, layout):
    config = BrokerConfig(vlog_segment_bytes=64 << 10, rocksdb_layout=layout)
    plan = steps(7)
    with RocksTimerStore.open(tmp_path / "single", config) as store:
        taken = count_taken(monkeypatch, Writer, "cancel_one")
        single = run(store, plan)
        monkeypatch.undo()
    with RocksTimerStore.open(tmp_path / "batch", config) as store:
        monkeypatch.setattr(Writer, "cancel_one", lambda *args: False)
        batch = run(store, plan)
        monkeypatch.undo()
    cancels = sum(1 for kind, _ in plan if kind == "cancel")
    assert 25 < taken[0] < cancels  # both paths ran: the single one until KEYS came
    assert True in single and False in single  # cancels that took a key and ones that did not
    assert single == batch
    assert contents(tmp_path / "single") == contents(tmp_path / "batch")


def test_a_store_reopened_after_single_cancels_checks_clean(tmp_path):
    config = BrokerConfig(vlog_segment_bytes=64 << 10, rocksdb_layout="vlog")
    plan = [step for step in steps(11) if step[0] == "cancel" or not any(
        r.message.keys for r in step[1])]
    with RocksTimerStore.open(tmp_path / "s", config) as store:
        before = run(store, plan)
    with RocksTimerStore.open(tmp_path / "s", config) as store:
        assert store.check()["problems"] == []
        assert [store.stats().pending, store.count_by_topic()] == before[-2:]
