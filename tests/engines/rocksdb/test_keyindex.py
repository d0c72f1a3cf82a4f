"""The RocksDB key index and due counters: entry codec, counts against brute force, the build
of an older store on open, and the invariant check."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rocksdict import WriteBatch

from rocks_timer.config import BrokerConfig
from rocks_timer.errors import CorruptRecordError, InvalidMessageError
from rocks_timer.message import Message
from rocks_timer.timer import keys as K
from rocks_timer.timer.histogram import count_in_memory
from rocks_timer.timer.rocksdb.duecount import expected_counters
from rocks_timer.timer.store import TimerKey, TimerRecord
from tests.support.rocks_support import T0, clock, layout, open_store  # noqa: F401 - fixtures
from tests.engines.rocksdb.test_keys import dues, msg_ids, timer_keys, topics

# the keys a send accepts (routing.validate_key): no space, no control character (Cc)
index_keys = st.text(alphabet=st.characters(blacklist_characters=" ",
                                            blacklist_categories=("Cs", "Cc")),
                     min_size=1, max_size=40)


@given(timer_keys, index_keys)
def test_entry_round_trip(key, business_key):
    raw = K.encode_key(key)
    entry = K.index_entry(raw, business_key)
    assert entry.startswith(K.key_index_prefix(key.topic, business_key))
    assert K.timer_key_of_entry(entry) == raw


@given(topics, index_keys, st.lists(st.tuples(dues, msg_ids), min_size=2, max_size=20))
def test_entries_of_one_key_sort_like_their_timer_keys(topic, business_key, parts):
    raws = [K.encode_key(TimerKey(d, topic, i)) for d, i in parts]
    by_entry = sorted(raws, key=lambda raw: K.index_entry(raw, business_key))
    assert by_entry == sorted(raws)


def test_bad_keys_and_entries():
    for key in ("", "a b"):
        with pytest.raises(InvalidMessageError):
            K.key_index_prefix("orders", key)
    with pytest.raises(InvalidMessageError):
        K.key_index_prefix("orders", "x" * 70_000)
    raw = K.encode_key(TimerKey(5, "orders", "AB" * 16))
    for bad in (b"", b"kix.", K.index_entry(raw, "k")[:-1], b"count.pending"):
        with pytest.raises(CorruptRecordError):
            K.timer_key_of_entry(bad)


def _message(i: int, keys=()) -> Message:
    return Message("orders", b"b" * (i % 7 * 100), msg_id=f"{i:032X}", keys=keys)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 40 * 86_400_000), min_size=1, max_size=60),
       st.lists(st.tuples(st.one_of(st.none(), st.integers(-2, 45 * 86_400)),
                          st.one_of(st.none(), st.integers(-2, 45 * 86_400))), max_size=8))
def test_counts_equal_brute_force(tmp_path_factory, offsets, bounds):
    from rocks_timer.timer.rocksdb import RocksTimerStore
    path = tmp_path_factory.mktemp("counts")
    with RocksTimerStore.open(path / "t", BrokerConfig(rocksdb_layout="inline")) as store:
        store.schedule([TimerRecord(T0 + off, _message(i)) for i, off in enumerate(offsets)], T0)
        ranges = [(None if lo is None else T0 + lo * 1000, None if hi is None else T0 + hi * 1000)
                  for lo, hi in bounds] + [(None, None)]
        dues = [T0 + off for off in offsets]
        assert store.count_due(ranges) == count_in_memory(dues, ranges)


def test_misaligned_bounds_are_refused(open_store):
    store = open_store()
    with pytest.raises(ValueError):
        store.count_due([(T0 + 1, None)])


def test_older_store_gets_its_index_built_on_open(open_store, tmp_path):
    store = open_store(path=tmp_path / "old")
    store.schedule([TimerRecord(T0 + 1000 * i, _message(i, (f"k{i % 2}",))) for i in range(6)],
                   T0)
    # remove what a store made before the key index would not have
    batch = WriteBatch(raw_mode=True)
    batch.delete_range(K.META_KEY_INDEX_PREFIX, K.META_KEY_INDEX_PREFIX + b"\xff", store.db.meta_h)
    for prefix, _ in K.DUE_COUNTER_WIDTHS:
        batch.delete_range(prefix, prefix + b"\xff" * 9, store.db.meta_h)
    batch.delete(K.META_KEY_INDEX, store.db.meta_h)
    store.db.write(batch)
    store.close()
    store = open_store(path=tmp_path / "old")
    assert [e.msg_id[-1] for e in store.find("orders", "k1")] == ["1", "3", "5"]
    assert store.count_due([(None, None), (T0 + 2000, T0 + 4000)]) == [6, 2]
    assert store.check()["problems"] == []


def test_check_reports_a_missing_entry_and_a_wrong_counter(open_store):
    store = open_store()
    store.schedule([TimerRecord(T0 + 1000, _message(1, ("k",)))], T0)
    raw = K.encode_key(TimerKey(T0 + 1000, "orders", f"{1:032X}"))
    batch = WriteBatch(raw_mode=True)
    batch.delete(K.index_entry(raw, "k"), store.db.meta_h)
    batch.delete(K.due_counter_keys(T0 + 1000)[0], store.db.meta_h)
    store.db.write(batch)
    problems = store.check()["problems"]
    assert any("lack their key index entry" in p for p in problems)
    assert any("due counters differ" in p for p in problems)


def test_retry_with_other_keys_moves_the_entries(open_store):
    store = open_store()
    store.schedule([TimerRecord(T0 + 1000, _message(1, ("a",)))], T0)
    store.schedule([TimerRecord(T0 + 1000, _message(1, ("b",)))], T0)  # same key: a retry
    assert [len(store.find("orders", k)) for k in ("a", "b")] == [0, 1]
    assert store.count_due([(None, None)]) == [1] and store.pending_count() == 1
    assert store.check()["problems"] == []


def _complete(store, due, pending: list[int]) -> None:
    store.complete(due, None)
    for record in due:
        pending.remove(record.key.due_ms)


def _counter_rows(store) -> int:
    return len(store.key_index.due.stored())


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(0, 3 * 86_400_000), min_size=1, max_size=120),
       st.lists(st.integers(1, 40), min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_counts_stay_exact_while_claims_clear_counters_by_range(tmp_path_factory, offsets, sizes,
                                                              rnd):
    """Deliveries clear the counters of whole seconds, hours and days inside their claims by
    range: sparse due times, claims ending inside a second, claims completed out of order
    and sends landing meanwhile keep every count equal to brute force and check() clean."""
    from rocks_timer.timer.rocksdb import RocksTimerStore
    path = tmp_path_factory.mktemp("cleared")
    with RocksTimerStore.open(path / "t", BrokerConfig(rocksdb_layout=rnd.choice(
            ["inline", "vlog"]))) as store:
        pending = [T0 + off for off in offsets]
        store.schedule([TimerRecord(due, _message(i)) for i, due in enumerate(pending)], T0)
        now, held, sent = T0, [], len(pending)
        ranges = [(None, None), (T0, T0 + 86_400_000), (T0 + 3_600_000, T0 + 7_200_000)]
        for size in sizes:
            now += rnd.randrange(0, 12 * 3_600_000)
            held.append(store.claim_due(now, size, 1 << 40))  # counted until completed
            if rnd.random() < 0.5:  # a send meanwhile, due in the claimed past: clamped
                scheduled = store.schedule([TimerRecord(T0, _message(sent))], now)
                pending.append(scheduled[0].key_due_ms)
                sent += 1
            while held and rnd.random() < 0.7:
                _complete(store, held.pop(rnd.randrange(len(held))), pending)
            assert store.count_due(ranges) == count_in_memory(pending, ranges)
        for due in held:
            _complete(store, due, pending)
        assert store.count_due(ranges) == count_in_memory(pending, ranges)
        assert store.pending_count() == len(pending)
        assert store.check()["problems"] == []
        assert _counter_rows(store) == len(expected_counters(pending))


def test_a_sparse_delivery_clears_its_counters_by_range(open_store):
    """A claim over many seconds writes a handful of counter changes, not one per second."""
    store = open_store()
    store.schedule([TimerRecord(T0 + 1000 * 7 * i, _message(i)) for i in range(2000)], T0)
    due = store.claim_due(T0 + 1000 * 7 * 1500, 10_000, 1 << 40)
    assert len(due) == 1501
    written = []
    real = store.db.write
    store.db.write = lambda batch: (written.append(batch.len()), real(batch))
    try:
        store.complete(due, None)
    finally:
        del store.db.write
    # was 1501 second + 4 hour/day counter deletes (+1 in vlog: the appended-bytes counter moves
    # with the removal record)
    assert written and written[0] < 32  # (and its segment's row: every body is in a segment)
    assert store.count_due([(None, None), (T0, T0 + 1000 * 7 * 1501)]) == [499, 0]
    assert store.check()["problems"] == []


def test_counters_of_key_index_version_1_are_rewritten_compactly_on_open(open_store, tmp_path):
    """A store written before the compact counters (14-byte keys, u64 counts, key index
    version 1) opens with its counters rewritten from its keys, its key index kept."""
    import struct
    path = tmp_path / "v1"
    store = open_store(path=path)
    store.schedule([TimerRecord(T0 + 1000 * (i % 4), _message(i, (f"k{i % 2}",)))
                    for i in range(9)], T0)
    batch = WriteBatch(raw_mode=True)  # what the older code had written
    for prefix, _ in K.DUE_COUNTER_WIDTHS:
        batch.delete_range(prefix, prefix + b"\xff" * 9, store.db.meta_h)
    legacy = dict(zip(K.LEGACY_DUE_COUNTER_PREFIXES, (1_000, 3_600_000, 86_400_000)))
    counts: dict[bytes, int] = {}
    for i in range(9):
        for prefix, width in legacy.items():
            name = prefix + struct.pack(">Q", (T0 + 1000 * (i % 4)) // width)
            counts[name] = counts.get(name, 0) + 1
    for name, n in counts.items():
        batch.put(name, struct.pack(">Q", n), store.db.meta_h)
    batch.put(K.META_KEY_INDEX, b"1", store.db.meta_h)
    store.db.write(batch)
    store.close()
    store = open_store(path=path)
    assert store.count_due([(None, None), (T0 + 1000, T0 + 3000)]) == [9, 4]
    assert store.check()["problems"] == []
    assert bytes(store.db.meta.get(K.META_KEY_INDEX)) == K.KEY_INDEX_VERSION
    assert all(store.db.meta.get(name) is None for name in counts)  # the old rows are gone
    assert sorted(e.msg_id[-1] for e in store.find("orders", "k1")) == ["1", "3", "5", "7"]


def test_a_key_index_from_a_newer_build_is_refused(open_store, tmp_path):
    from rocks_timer.errors import ConfigError
    path = tmp_path / "newer"
    store = open_store(path=path)
    store.db.meta.put(K.META_KEY_INDEX, b"9")
    store.close()
    with pytest.raises(ConfigError, match="format.key_index is '9', written by a newer build"):
        open_store(path=path)


def test_a_counter_is_a_few_bytes():
    name = K.due_counter_keys(T0)[0]
    assert len(name) == 8 and K.due_counter_bucket(name) == T0 // 1000
    assert [len(K.pack_count(n)) for n in (1, 255, 256, 70_000)] == [1, 1, 2, 3]
    assert K.unpack_count(K.pack_count(123_456_789)) == 123_456_789
