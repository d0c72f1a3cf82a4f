"""Where the RocksDB store's pending count is durable (key index version 4): the sum of the
per-topic counters while the key index is on (no row of its own, so a send writes one counter
row for both), its own ``count.pending`` row while it is off; a store written before (version 3,
with the row) is upgraded on open, and a read-only check and a repair read it from wherever it
lives."""
from __future__ import annotations

import os

import pytest
from rocksdict import WriteBatch

from tests.support.rocks_support import (BIG, T0, layout, open_store,  # noqa: F401 - fixtures
                                        rec)
from rocks_timer import ConfigError
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import RocksTimerStore
from rocks_timer.timer.rocksdb.meta import pack_u64
from rocks_timer.timer.rocksdb.readonly import ReadOnlyRocksStore


def topic_sum(store) -> int:
    counts, complete = store.count_by_topic()
    assert complete
    return sum(counts.values())


def row(store) -> bytes | None:
    value = store.db.meta.get(K.META_PENDING)
    return None if value is None else bytes(value)


def agrees(store, n: int) -> None:
    """The pending count is ``n``, the topic counters sum to it, ``check`` finds the keys."""
    assert store.pending_count() == n == topic_sum(store)
    report = store.check()
    assert report["problems"] == [] and report["live_keys"] == n


def test_the_pending_count_is_the_topic_counters_sum_through_every_change(open_store,
                                                                        tmp_path):
    store = open_store()
    big = bytes(700)  # a value segment's body in vlog
    for i in range(6):  # single sends
        store.schedule([rec(i, T0 + 1000 + i, topic=("a", "b")[i % 2], body=big)], T0)
    store.schedule([rec(10 + i, T0 + 2000 + i, topic="c", keys=(f"k{i % 2}",))
                    for i in range(6)], T0)
    store.schedule([rec(2, T0 + 1002, topic="a", body=big)], T0)  # a retry adds nothing
    assert row(store) is None  # the key index holds the count: no row written
    agrees(store, 12)
    assert store.cancel(store.scan(topic="b")[0].handle, T0)
    assert len(store.cancel_by_key("c", "k0", T0).handles) == 3
    agrees(store, 8)
    store.reschedule_by_key("c", "k1", T0 + 60_000, T0)
    agrees(store, 8)
    due = store.claim_due(T0 + 1003, 100, BIG)
    assert len(due) == 3
    agrees(store, 8)  # in flight: pending until completed
    store.complete(due, None)
    agrees(store, 5)
    store.close()
    store = open_store()  # durable: read back from the topic counters
    agrees(store, 5)
    assert row(store) is None
    store.close()
    report = RocksTimerStore.repair(tmp_path / "timer", store.config, rebuild=True).as_dict()
    assert report["ok"], report
    store = open_store()
    agrees(store, 5)
    assert row(store) is None  # the repair wrote a row; the open that rebuilt the index took it
    assert bytes(store.db.meta.get(K.META_KEY_INDEX)) == K.KEY_INDEX_VERSION


def test_a_store_at_key_index_version_3_with_its_pending_row_is_upgraded_on_open(open_store):
    store = open_store()
    store.schedule([rec(i, T0 + 1000 + i, topic=("a", "b")[i % 2]) for i in range(7)], T0)
    batch = WriteBatch(raw_mode=True)  # what version 3 wrote: the row beside the counters
    batch.put(K.META_PENDING, pack_u64(7), store.db.meta_h)
    batch.put(K.META_KEY_INDEX, b"3", store.db.meta_h)
    store.db.write(batch)
    store.close()
    store = open_store()
    assert bytes(store.db.meta.get(K.META_KEY_INDEX)) == K.KEY_INDEX_VERSION
    assert row(store) is None
    agrees(store, 7)
    store.schedule([rec(100, T0 + 5000, topic="a")], T0)
    agrees(store, 8)


def test_a_version_3_store_whose_row_and_counters_disagree_is_recounted_from_the_keys(
        open_store):
    store = open_store()
    store.schedule([rec(i, T0 + 1000 + i, topic="a") for i in range(4)], T0)
    batch = WriteBatch(raw_mode=True)
    batch.put(K.META_PENDING, pack_u64(4), store.db.meta_h)
    batch.put(K.topic_count_key(b"a"), K.pack_count(9), store.db.meta_h)  # a wrong counter
    batch.put(K.META_KEY_INDEX, b"3", store.db.meta_h)
    store.db.write(batch)
    store.close()
    store = open_store()
    assert row(store) is None
    agrees(store, 4)


def test_without_the_key_index_the_row_holds_the_count_and_the_next_open_takes_it_back(
        open_store):
    store = open_store()
    store.schedule([rec(i, T0 + 1000 + i, topic="a") for i in range(3)], T0)
    store.close()
    store = open_store(key_index=False)
    assert store.pending_count() == 3 and row(store) == pack_u64(3)
    store.schedule([rec(10 + i, T0 + 2000 + i, topic="b") for i in range(2)], T0)
    store.schedule([rec(20, T0 + 3000, topic="b")], T0)  # a single send keeps the row too
    store.complete(store.claim_due(T0 + 1000, 100, BIG), None)
    assert store.pending_count() == 5 and row(store) == pack_u64(5)
    assert store.check()["problems"] == []
    store.close()
    store = open_store(key_index=False)  # still off: the row is the count
    assert store.pending_count() == 5
    for rebuild in (store.key_index.rebuild, store.key_index.rebuild_counters):
        with pytest.raises(ConfigError, match="opened without the key index"):
            rebuild()  # its marker would say the topic counters hold the count
    store.close()
    store = open_store()
    assert row(store) is None
    agrees(store, 5)


def test_a_read_only_check_reads_the_count_from_the_topic_counters(open_store, tmp_path):
    store = open_store()
    store.schedule([rec(i, T0 + 1000 + i, topic=("a", "b")[i % 2], body=os.urandom(700))
                    for i in range(9)], T0)
    store.close()
    with ReadOnlyRocksStore(tmp_path / "timer") as ro:
        assert ro.pending_count() == 9
        report = ro.check()
        assert report["problems"] == [] and report["pending"] == 9


def test_a_read_only_check_names_a_topic_counter_that_makes_the_count_wrong(open_store,
                                                                           tmp_path):
    store = open_store()
    store.schedule([rec(i, T0 + 1000 + i, topic="a") for i in range(3)], T0)
    batch = WriteBatch(raw_mode=True)
    batch.put(K.topic_count_key(b"a"), K.pack_count(5), store.db.meta_h)
    store.db.write(batch)
    store.close()
    with ReadOnlyRocksStore(tmp_path / "timer") as ro:
        problems = ro.check()["problems"]
    assert any("pending counter 5 but 3 keys" in p for p in problems), problems
    assert any("topic counters differ" in p for p in problems), problems
