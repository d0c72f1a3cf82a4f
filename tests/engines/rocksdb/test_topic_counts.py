"""The per-topic pending counters of the RocksDB store (issue 28, ``rocketmq_timing_messages``):
exact after every kind of change, durable, checked by ``check``, rebuilt where missing; and
the store opened without its key index (the measurement baseline of ``bench.keys``)."""
from __future__ import annotations

import pytest
from rocksdict import WriteBatch

from tests.support.rocks_support import (BIG, T0, layout, open_store,  # noqa: F401 - fixtures
                                        raw_timer_put, rec)
from rocks_timer import BrokerConfig, ConfigError
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.store import TimerKey


def walked(store) -> dict[str, int]:
    """Pending keys per topic, by a scan of every pending entry."""
    counts: dict[str, int] = {}
    after = None
    while True:
        page = store.scan(limit=500, after=after)
        for entry in page:
            counts[entry.topic] = counts.get(entry.topic, 0) + 1
        after = page.next_after
        if after is None:
            return dict(sorted(counts.items()))


def exact(store) -> dict[str, int]:
    counts, complete = store.count_by_topic()
    assert complete and counts == walked(store)
    return counts


def test_topic_counts_follow_every_change(open_store, tmp_path):
    store = open_store()
    big = bytes(700)  # a body for a value segment in vlog
    store.schedule([rec(i, T0 + 1000 + i, topic="a", body=big) for i in range(10)], T0)
    store.schedule([rec(100, T0 + 5000, topic="b", body=big)], T0)  # a single send
    store.schedule([rec(200 + i, T0 + 9000 + i, topic="c", keys=(f"k{i % 2}",))
                    for i in range(6)], T0)
    assert exact(store) == {"a": 10, "b": 1, "c": 6}
    store.schedule([rec(3, T0 + 1000 + 3, topic="a", body=big)], T0)  # a retry: no change
    assert exact(store) == {"a": 10, "b": 1, "c": 6}
    handle = store.scan(topic="b")[0].handle
    assert store.cancel(handle, T0)
    assert exact(store) == {"a": 10, "c": 6}  # a topic at 0 is gone
    assert len(store.cancel_by_key("c", "k0", T0).handles) == 3
    assert exact(store) == {"a": 10, "c": 3}
    moved = store.reschedule_by_key("c", "k1", T0 + 60_000, T0)
    assert [r.status for r in moved] == ["rescheduled"] * 3
    assert exact(store) == {"a": 10, "c": 3}
    due = store.claim_due(T0 + 1004, 100, BIG)
    assert len(due) == 5
    assert exact(store) == {"a": 10, "c": 3}  # in flight: pending until completed
    store.complete(due, None)
    assert exact(store) == {"a": 5, "c": 3}
    assert store.reconcile([TimerKey(T0 + 1005, "a", f"{5:032X}")], 0) == 1
    assert exact(store) == {"a": 4, "c": 3}
    assert store.check()["problems"] == []
    store.close()
    reopened = open_store()  # durable: read back from meta, not walked
    assert reopened.count_by_topic() == ({"a": 4, "c": 3}, True)
    assert reopened.check()["problems"] == []


def test_a_set_aside_value_leaves_its_topic_count_and_a_restore_puts_it_back(tmp_path,
                                                                              open_store):
    inline_small = BrokerConfig(vlog_inline_max_bytes=128)
    path = tmp_path / "timer"
    store = open_store(inline_small, path=path)
    store.schedule([rec(i, T0 + 100 + i, topic="a") for i in range(3)], T0)
    store.close()
    bad = K.encode_key(TimerKey(T0 + 101, "a", f"{1:032X}"))
    raw_timer_put(path, bad, b"\x01\x00garbage")
    # a damaged value whose first byte is a pointer's version (inline: not a pointer at all)
    looks_like_a_pointer = K.encode_key(TimerKey(T0 + 102, "a", f"{2:032X}"))
    raw_timer_put(path, looks_like_a_pointer, bytes((I.POINTER_VERSION,)) + b"short")
    store = open_store(inline_small, path=path)
    store.complete(store.claim_due(T0 + 1000, 100, BIG), None)
    assert exact(store) == {} and store.stats().extra["corrupt"] == 2
    assert store.check()["problems"] == []
    store.restore_set_aside(None, T0)  # neither decodes: both refused, nothing changes
    assert exact(store) == {} and store.check()["problems"] == []


def test_check_names_a_wrong_topic_counter_and_a_rebuild_mends_it(open_store, tmp_path):
    store = open_store()
    store.schedule([rec(i, T0 + 1000 + i, topic="a") for i in range(4)], T0)
    batch = WriteBatch(raw_mode=True)
    batch.put(K.topic_count_key(b"a"), K.pack_count(9), store.db.meta_h)
    batch.put(K.topic_count_key(b"ghost"), K.pack_count(1), store.db.meta_h)
    store.db.write(batch)
    problems = store.check()["problems"]
    assert any("2 topic counters differ from the keys" in p for p in problems), problems
    store.key_index.rebuild()
    assert store.check()["problems"] == [] and exact(store) == {"a": 4}


def test_a_store_from_before_the_topic_counters_gets_them_on_open(open_store):
    store = open_store()
    store.schedule([rec(i, T0 + 1000 + i, topic=("a", "b")[i % 2]) for i in range(5)], T0)
    batch = WriteBatch(raw_mode=True)  # what key index version 2 left: no topic counters
    batch.delete_range(K.META_TOPIC_COUNT_PREFIX, K.META_TOPIC_COUNT_PREFIX + b"\xff",
                       store.db.meta_h)
    batch.put(K.META_KEY_INDEX, b"2", store.db.meta_h)
    store.db.write(batch)
    store.close()
    store = open_store()
    assert exact(store) == {"a": 3, "b": 2}
    assert bytes(store.db.meta.get(K.META_KEY_INDEX)) == K.KEY_INDEX_VERSION
    assert store.check()["problems"] == []


def test_without_the_key_index_the_reads_that_need_it_refuse_and_the_next_open_rebuilds(
        open_store):
    store = open_store(key_index=False)
    store.schedule([rec(i, T0 + 1000 + i, topic="a", keys=("k",)) for i in range(3)], T0)
    for call in (lambda: store.find("a", "k"), lambda: store.cancel_by_key("a", "k", T0),
                 lambda: store.count_due([(None, None)]), store.count_by_topic):
        with pytest.raises(ConfigError, match="opened without the key index"):
            call()
    assert store.db.meta.get(K.META_KEY_INDEX) is None  # so the next open rebuilds
    store.close()
    store = open_store()
    assert exact(store) == {"a": 3}
    assert len(store.find("a", "k")) == 3
    assert store.count_due([(None, None)]) == [3]
    assert store.check()["problems"] == []


def test_the_native_topic_count_equals_its_reference():
    import random

    from rocks_timer.timer.rocksdb import topiccount
    native = pytest.importorskip("rocks_timer._native.codec")
    rng = random.Random(3)
    topics = ["a", "bb", "orders", "ü" * 10, "t" * 255]
    raws = [K.encode_key(TimerKey(T0 + rng.randrange(10**6), rng.choice(topics),
                                  f"{i:032X}")) for i in range(2000)]
    raws.sort()  # runs of one topic, and topics interleaved
    for sample in (raws, raws[:1], [], sorted(raws, key=lambda r: r[9:]), raws + [b"short"]):
        assert native.topic_counts(sample) == topiccount.topic_counts_py(sample)
    assert native.topic_counts(dict.fromkeys(raws)) == topiccount.topic_counts_py(raws)
    with pytest.raises(TypeError):
        native.topic_counts(["not bytes"])
