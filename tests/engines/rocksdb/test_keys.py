"""The RocksDB key codec: round trip, byte order, bounds, corrupt keys."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocks_timer.errors import CorruptRecordError, InvalidMessageError
from rocks_timer.timer import keys as K
from rocks_timer.timer.store import TimerKey

TOPIC_CHARS = "%|abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
topics = st.text(alphabet=TOPIC_CHARS, min_size=1, max_size=127)
msg_ids = st.binary(min_size=16, max_size=16).map(lambda b: b.hex().upper())
dues = st.integers(min_value=0, max_value=K.MAX_DUE_MS)
timer_keys = st.builds(TimerKey, dues, topics, msg_ids)


def order_tuple(key: TimerKey) -> tuple:
    topic = key.topic.encode("utf-8")
    return (key.due_ms, len(topic), topic, bytes.fromhex(key.msg_id))


def test_fixed_sizes():
    assert K.DUE.size == K.DUE_SIZE == 8
    assert K.FIXED_KEY_SIZE == 25
    key = TimerKey(1, "orders", "00" * 16)
    assert len(K.encode_key(key)) == 25 + len("orders")


@given(timer_keys)
def test_round_trip(key):
    assert K.decode_key(K.encode_key(key)) == key


@given(st.builds(TimerKey, dues, st.text(min_size=1, max_size=60).filter(
    lambda t: len(t.encode("utf-8")) <= 255), msg_ids))
def test_round_trip_utf8_topics(key):
    assert K.decode_key(K.encode_key(key)) == key


@given(st.lists(timer_keys, min_size=2, max_size=30))
def test_byte_order_equals_tuple_order(key_list):
    by_bytes = sorted(key_list, key=K.encode_key)
    by_tuple = sorted(key_list, key=order_tuple)
    assert [K.encode_key(k) for k in by_bytes] == [K.encode_key(k) for k in by_tuple]


@given(timer_keys, timer_keys)
def test_due_order_dominates(a, b):
    if a.due_ms < b.due_ms:
        assert K.encode_key(a) < K.encode_key(b)


@given(timer_keys, st.integers(min_value=0, max_value=K.MAX_DUE_MS))
def test_due_prefix_bounds(key, bound_ms):
    raw = K.encode_key(key)
    assert (raw < K.due_prefix(bound_ms)) == (key.due_ms < bound_ms)
    assert K.key_due_ms(raw) == key.due_ms
    assert K.key_successor(raw) > raw


def test_due_prefix_clamps():
    assert K.due_prefix(-5) == b"\x00" * 8
    assert K.due_prefix(K.MAX_DUE_MS + 10) == b"\xff" * 8


@pytest.mark.parametrize("raw", [
    b"", b"\x00" * 25, b"\x00" * 8 + b"\x05abc" + b"\x00" * 16,
    b"\x00" * 8 + b"\x03abc" + b"\x00" * 15, b"\x00" * 8 + b"\x02\xff\xfe" + b"\x00" * 16,
])
def test_decode_rejects_bad_keys(raw):
    with pytest.raises(CorruptRecordError) as info:
        K.decode_key(raw)
    assert info.value.raw == raw
    assert info.value.where == raw.hex()


@pytest.mark.parametrize("key", [
    TimerKey(-1, "t", "00" * 16), TimerKey(1 << 64, "t", "00" * 16), TimerKey(1, "", "00" * 16),
    TimerKey(1, "x" * 256, "00" * 16), TimerKey(1, "t", "abc"),
])
def test_encode_rejects_bad_parts(key):
    with pytest.raises(InvalidMessageError):
        K.encode_key(key)


def test_index_entries_are_index_entry_of_every_key_in_order():
    raws = [K.encode_key(TimerKey(1_700_000_000_000 + i, topic, f"{i:032X}"))
            for i, topic in enumerate(["a", "orders", "é" * 20, "a"])]
    names = [("k1", "k2"), (), ("ü",), ("k1",)]
    assert K.index_entries(raws, names) == [
        K.index_entry(raw, name) for raw, group in zip(raws, names) for name in group]
