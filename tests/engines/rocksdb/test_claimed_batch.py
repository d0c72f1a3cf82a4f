"""The RocksDB claim's column-wise batch (``ClaimedBatch``) and the backlog rule of the
tombstone reclaim, on both layouts."""
from __future__ import annotations

import random

from tests.support.rocks_support import (BIG, T0, clock, ids, layout, msg, open_store,  # noqa: F401 - fixtures
                          rec)

from rocks_timer.message import TIMER_OUT_MS
from rocks_timer.timer import keys as K
from rocks_timer.timer.delivery import prepared_copy_py
from rocks_timer.timer.rocksdb.claimed import ClaimedBatch, ClaimedRecord
from rocks_timer.timer.store import join_records


def test_a_claim_is_a_sequence_of_records(open_store):
    store = open_store()
    store.schedule([rec(i, T0 + 10 + i, keys="k%d" % i) for i in range(5)], T0)
    batch = store.claim_due(T0 + 100, 100, BIG)
    assert type(batch) is ClaimedBatch and len(batch) == 5 and bool(batch)
    assert ids(batch) == [f"{i:032X}" for i in range(5)]
    assert batch[0] is batch[0] and isinstance(batch[-1], ClaimedRecord)
    assert batch == list(batch) and batch[1:3] == [batch[1], batch[2]]
    assert [r.message.keys for r in batch] == [("k%d" % i,) for i in range(5)]
    for record, copy in zip(batch, batch.copies):  # the prepared copies, as the reference
        expected = prepared_copy_py(record.message, record.key.due_ms, T0 + 100)
        assert copy == expected
        assert record.copy == copy
    assert store.claim_due(T0 + 100, 100, BIG) == []  # nothing new is due: a plain empty list


def test_completing_joined_batches_equals_completing_records(open_store, tmp_path):
    """The same deliveries completed from joined column-wise batches and from a plain list of
    records leave the two stores in the same state (pending, cursor, key index, counters)."""
    stores = [open_store(path=tmp_path / name) for name in ("columns", "records")]
    for store in stores:
        store.schedule([rec(i, T0 + 10 + i, keys="k%d" % (i % 3)) for i in range(30)], T0)
        store.schedule([rec(100, T0 + 10_000)], T0)
    columns, records = stores
    parts = [columns.claim_due(T0 + 100, 10, BIG) for _ in range(3)]
    joined = join_records(parts)
    assert type(joined) is ClaimedBatch and len(joined) == 30
    columns.complete(joined, 77)
    claimed = [columns_record for part in
               [records.claim_due(T0 + 100, 10, BIG) for _ in range(3)] for columns_record in part]
    records.complete(list(claimed), 77)
    for store in stores:
        assert store.pending_count() == 1 and store.reconcile_from() == 77
        assert store.count_due([(None, None)]) == [1]
        assert [e.msg_id for e in store.scan(limit=10)] == [f"{100:032X}"]
        assert list(store.find("orders", "k1")) == []


def test_complete_skips_what_is_not_in_flight(open_store):
    store = open_store()
    store.schedule([rec(i, T0 + 10) for i in range(4)], T0)
    batch = store.claim_due(T0 + 100, 10, BIG)
    store.complete(batch[:2], 5)
    store.complete(batch, 6)  # the first two again: skipped, the rest completed once
    assert store.pending_count() == 0 and store.reconcile_from() == 6


def test_a_copy_carries_the_due_time(open_store):
    store = open_store()
    [scheduled] = store.schedule([rec(7, T0 + 50)], T0)
    [record] = store.claim_due(T0 + 60, 10, BIG)
    assert K.key_due_ms(record.token) == scheduled.key_due_ms
    assert str(scheduled.key_due_ms).encode() in record.copy
    assert TIMER_OUT_MS.encode() in record.copy


def test_reclaim_waits_while_a_backlog_drains(open_store):
    store = open_store(reclaim_after_deletes=10)
    store.schedule([rec(i, T0 + 10) for i in range(200)], T0)
    for _ in range(3):  # each claim fills its budget: a backlog is draining
        store.complete(store.claim_due(T0 + 100, 20, BIG), None)
        store.maintain(T0 + 100)
        store.wait_for_maintenance()
    assert store.stats().extra["deletes_since_reclaim"] == 60  # deferred, below 10 x 10
    store.complete(store.claim_due(T0 + 100, 50, BIG), None)  # 110 deletes: over the cap
    store.maintain(T0 + 100)
    store.wait_for_maintenance()
    assert store.stats().extra["deletes_since_reclaim"] == 0
    store.complete(store.claim_due(T0 + 100, 20, BIG), None)  # still a backlog: waits
    store.maintain(T0 + 100)
    assert store.stats().extra["deletes_since_reclaim"] == 20
    store.complete(store.claim_due(T0 + 100, 1000, BIG), None)  # caught up: reclaims
    store.maintain(T0 + 100)
    store.wait_for_maintenance()
    assert store.stats().extra["deletes_since_reclaim"] == 0 and store.pending_count() == 0


def test_spans_cover_exactly_what_each_claim_took(open_store):
    """A claim's span is [its first key, the successor of its last); joining claims keeps
    every span, a slice has none (it does not hold its claim's whole range)."""
    store = open_store()
    store.schedule([rec(i, T0 + 10 + i) for i in range(30)], T0)
    parts = [store.claim_due(T0 + 100, 10, BIG) for _ in range(3)]
    for part in parts:
        assert part.spans == [(part.tokens[0], K.key_successor(part.tokens[-1]))]
    assert parts[0].spans[0][1] <= parts[1].spans[0][0]  # claims advance: spans never overlap
    joined = join_records(parts)
    assert joined.spans == [span for part in parts for span in part.spans]
    assert parts[0][2:5].spans is None
    assert ClaimedBatch.join([parts[0], parts[1][1:]]).spans is None
    store.complete(joined, None)
    assert store.pending_count() == 0 and store.check()["problems"] == []


def test_bodies_read_from_segments_are_sliced_only_when_asked(tmp_path):
    """In ``vlog`` a claim's bodies stay in the buffer its segment records were read into: the
    batch holds no bytes object per body until one is read, and joining claims keeps it so;
    what is read equals the stored value, by index, negative index and slice."""
    from rocks_timer import BrokerConfig
    from rocks_timer.timer.rocksdb import RocksTimerStore
    from rocks_timer.timer.rocksdb.claim_codec import ReadBodies, _native_claim
    from rocks_timer.timer.rocksdb.claimed import Joined
    from rocks_timer.timer.values import encode_value

    with RocksTimerStore.open(tmp_path / "v", BrokerConfig(rocksdb_layout="vlog")) as store:
        records = [rec(i, T0 + 10 + i, body=random.Random(i).randbytes(2000)) for i in range(12)]
        records.append(rec(99, T0 + 50, body=b"small"))  # kept inline in the index
        store.schedule(records, T0)
        parts = [store.claim_due(T0 + 100, 5, BIG) for _ in range(3)]
        expected = {r.message.msg_id: encode_value(r.message, 1 << 20) for r in records}
        if _native_claim is not None:
            assert all(type(part.bodies) is ReadBodies for part in parts)
            assert [b is None for b in parts[0].bodies._given] == [True] * 5
        joined = join_records(parts)
        assert type(joined.bodies) is Joined and len(joined.bodies) == 13
        got = [joined.bodies[i] for i in range(13)]
        assert got == [expected[K.decode_key(t).msg_id] for t in joined.tokens]
        assert joined.bodies[-1] == got[-1] and joined.bodies[2:5] == got[2:5]
        assert list(parts[1].bodies) == got[5:10] and parts[1].bodies[-2:] == got[8:10]
        assert [r.message.body for r in joined] == [
            next(x for x in records if x.message.msg_id == K.decode_key(t).msg_id).message.body
            for t in joined.tokens]
        store.complete(joined, None)
        assert store.pending_count() == 0
