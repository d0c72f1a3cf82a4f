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


def test_a_keyed_batch_completed_in_part_drops_exactly_its_index_entries(open_store):
    """A keyed claim whose first records were completed already (a slice) is completed key by
    key: each remaining record's entries go, with its counters, and nothing else."""
    store = open_store()
    store.schedule([rec(i, T0 + 10 + i, keys=f"k{i % 3} shared", body=bytes(700))
                    for i in range(9)], T0)
    store.schedule([rec(50, T0 + 10_000, keys="k0")], T0)  # stays pending
    batch = store.claim_due(T0 + 100, 100, BIG)
    assert len(batch) == 9
    store.complete(batch[:4], None)
    assert len(store.find("orders", "shared")) == 5
    store.complete(batch, None)  # the first four again: skipped
    assert len(store.find("orders", "shared")) == 0
    assert [e.msg_id for e in store.find("orders", "k0")] == [f"{50:032X}"]
    assert store.pending_count() == 1 and store.check()["problems"] == []


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


def test_the_native_index_removals_equal_their_reference():
    """A keyed completion's key index entries (``index_removals``): the native call gives the
    reference's entries for every value it reads, and names the others (non-ASCII KEYS,
    properties with a name twice, corrupt values) for the reference, which reads or refuses
    them. Both return the entries in record order; the left-over ones come after."""
    import pytest

    from rocks_timer.errors import CorruptRecordError
    from rocks_timer.message import Message
    from rocks_timer.timer.rocksdb import claimed
    from rocks_timer.timer.store import TimerKey
    from rocks_timer.timer.values import HEADER, encode_value
    native = pytest.importorskip("rocks_timer._native.codec").index_removals
    rng = random.Random(7)
    words = ["a", "order-1", "k" * 300, "x y", "  ", "ü-key", "order-1 order-1", "a  b",
             " lead", "trail "]
    raws, values, good = [], [], []
    for i in range(400):
        topic = rng.choice(["t", "orders", "z" * 127, "é"])
        keys = tuple(rng.choice(words) for _ in range(rng.randrange(0, 4)))
        body = rng.choice([b"p", bytes(1000), rng.randbytes(600)])  # lz4 for the zeros
        message = Message(topic=topic, body=body, msg_id=f"{i:032X}", keys=" ".join(keys),
                          tags=rng.choice([None, "TagA"]))
        raws.append(K.encode_key(TimerKey(T0 + rng.randrange(10**9), topic, f"{i:032X}")))
        values.append(encode_value(message, 256))
        good.append(True)
    # a name twice (the last KEYS wins in the reference): handmade properties
    value = bytearray(values[0])
    props = b"KEYS\x01first\x02UNIQ_KEY\x01" + b"A" * 32 + b"\x02KEYS\x01second\x02"
    topic_len = value[23]
    old_props = HEADER.unpack_from(value)[8]
    value[24:28] = len(props).to_bytes(4, "big")
    value[36 + topic_len:36 + topic_len + old_props] = props
    values.append(bytes(value))
    raws.append(raws[0])
    good.append(True)
    for damage in (lambda v: v[:20], lambda v: b"\x09" + v[1:], lambda v: v[:-1],
                   lambda v: v[:1] + b"\x04" + v[2:]):
        values.append(damage(values[1]))
        raws.append(raws[1])
        good.append(False)
    entries, slow = native(raws, values, K.META_KEY_INDEX_PREFIX)
    for i in range(len(values)):
        if not good[i]:
            assert i in slow
            with pytest.raises(CorruptRecordError):
                claimed.index_removals_py([raws[i]], [values[i]], K.META_KEY_INDEX_PREFIX)
    read = [i for i in range(len(values)) if i not in slow]
    assert len(read) > 300  # most values are read natively
    assert entries == claimed.index_removals_py([raws[i] for i in read],
                                                [values[i] for i in read],
                                                K.META_KEY_INDEX_PREFIX)[0]
    left = [i for i in slow if good[i]]
    assert left  # the non-ASCII KEYS and the doubled name went to the reference
    assert claimed.index_removals_py([raws[i] for i in left], [values[i] for i in left],
                                     K.META_KEY_INDEX_PREFIX)[0]  # which reads them
    # and ClaimedBatch.index_entries joins the two: the reference's entries, as a multiset
    batch = ClaimedBatch([raws[i] for i in range(len(values)) if good[i]],
                         [values[i] for i in range(len(values)) if good[i]],
                         [0] * sum(good), [None] * sum(good), [None] * sum(good))
    expected = claimed.index_removals_py(batch.tokens, list(batch.bodies),
                                         K.META_KEY_INDEX_PREFIX)[0]
    assert sorted(batch.index_entries()) == sorted(expected)
    assert sorted(batch.index_entries([3, 1, 2])) == sorted(
        claimed.index_removals_py([batch.tokens[i] for i in (3, 1, 2)],
                                  [batch.bodies[i] for i in (3, 1, 2)],
                                  K.META_KEY_INDEX_PREFIX)[0])
