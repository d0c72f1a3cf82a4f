"""The native delivery copies (rocks_timer/_native/delivery.c) against the reference: for every
stored value the native path either leaves the record to the reference (None) or gives the
prepared record ``prepared_copy_py`` gives, byte for byte, which the CommitLog writer (C and
Python) encodes to the same bytes as the reference ``Message`` copy."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocks_timer import Message
from rocks_timer.batch_encoder import encode_batch_native, encode_batch_py
from rocks_timer.errors import CorruptRecordError
from rocks_timer.timer import delivery
from rocks_timer.timer.delivery import delivery_copy_py, native_copies, prepared_copy_py
from rocks_timer.timer.values import decode_value, encode_value

pytestmark = pytest.mark.skipif(delivery._native_copies is None, reason="no C extension built")

STORE_MS, DUE, NOW = 1_767_225_600_123, 1_767_225_600_000, 1_767_225_600_050
names = st.sampled_from(["a", "KEYS", "TAGS", "UNIQ_KEY", "TIMER_DEQUEUE_MS", "TIMER_OUT_MS",
                         "x y", "ü"])
values = st.sampled_from(["1", "v", "k1 k2", " lead", "a  b", "0123456789abcdef0123456789abcdef",
                          "ß", "tail "])


@st.composite
def stored_values(draw):
    props = draw(st.dictionaries(names, values, max_size=4))
    msg = Message(draw(st.sampled_from(["orders", "ü-topic", "a|b%c"])),
                  draw(st.one_of(st.binary(max_size=40), st.just(b"z" * 300))),
                  tags=draw(st.one_of(st.none(), st.sampled_from(["t", "tä"]))),
                  keys=draw(st.sampled_from([(), ("k1",), ("k1", "k2")])),
                  properties=props, msg_id=draw(st.one_of(
                      st.none(), st.just("0123456789ABCDEF0123456789ABCDEF"))),
                  queue_id=draw(st.one_of(st.none(), st.integers(0, 1023))),
                  flag=draw(st.integers(-5, 5)), born_ms=draw(st.one_of(st.none(),
                                                                       st.just(STORE_MS - 9))),
                  reconsume_times=draw(st.integers(0, 3)))
    return encode_value(msg, draw(st.sampled_from([64, 1 << 20])))


def commitlog_bytes(copy, encode=encode_batch_py) -> bytes:
    batch = encode([copy], 0, 1000, 1 << 30, STORE_MS, {}, lambda key: 7, lambda msg: 0)
    return batch.data + batch.meta + repr(batch.queues).encode()


@settings(max_examples=500, deadline=None)
@given(stored_values())
def test_native_copy_encodes_like_the_reference(value):
    native = native_copies([value], [DUE], NOW)[0]
    message = decode_value(b"k", value)
    reference = delivery_copy_py(message, DUE, NOW)
    if native is not None:
        assert native == prepared_copy_py(message, DUE, NOW)
        expected = commitlog_bytes(reference)
        assert commitlog_bytes(native) == expected
        assert commitlog_bytes(native, encode_batch_native) == expected


@settings(max_examples=500, deadline=None)
@given(stored_values(), st.integers(0, 400), st.integers(0, 255))
def test_damaged_values_never_pass_as_something_else(value, at, byte):
    damaged = bytearray(value)
    damaged[at % len(damaged)] = byte
    damaged = bytes(damaged)
    native = native_copies([damaged], [DUE], NOW)[0]
    try:
        message = decode_value(b"k", damaged)
    except CorruptRecordError:
        assert native is None
        return
    if native is not None:
        assert native == prepared_copy_py(message, DUE, NOW)


def test_the_common_value_takes_the_native_path_and_odd_ones_do_not():
    ids = "0123456789ABCDEF0123456789ABCDEF"
    plain = encode_value(Message("orders", b"x" * 100, tags="t", keys=["k"], msg_id=ids,
                                 born_ms=STORE_MS), 1 << 20)
    packed = encode_value(Message("orders", b"x" * 1000, msg_id=ids, born_ms=STORE_MS), 64)
    unborn = encode_value(Message("orders", b"x", msg_id=ids), 64)
    copies = native_copies([plain, packed, unborn, b"", b"\x01" * 40], [DUE] * 5, NOW)
    assert type(copies[0]) is bytes and type(copies[2]) is bytes
    assert copies[1] is None and copies[3:] == [None, None]
    assert f"TIMER_OUT_MS\x01{DUE}\x02TIMER_DEQUEUE_MS\x01{NOW}\x02".encode() in copies[0]
