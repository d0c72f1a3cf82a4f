"""The native delivery copies (rocks_timer/_native/delivery.c) against the reference
``delivery_copy_py``: for every stored value the native path either leaves the record to the
reference (None) or gives a copy the CommitLog encodes to the same bytes."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocks_timer import Message
from rocks_timer.batch_encoder import encode_batch_py
from rocks_timer.errors import CorruptRecordError
from rocks_timer.timer import delivery
from rocks_timer.timer.delivery import delivery_copies, delivery_copy_py, native_copies
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


def commitlog_bytes(copy) -> bytes:
    batch = encode_batch_py([copy], 0, 1000, 1 << 30, STORE_MS, {}, lambda key: 7,
                            lambda msg: 0)
    return batch.data + batch.meta


@settings(max_examples=500, deadline=None)
@given(stored_values())
def test_native_copy_encodes_like_the_reference(value):
    native = native_copies([value], [DUE], NOW)[0]
    reference = delivery_copy_py(decode_value(b"k", value), DUE, NOW)
    if native is not None:
        assert commitlog_bytes(native) == commitlog_bytes(reference)
        assert native.msg_id == reference.msg_id and native.topic == reference.topic


@settings(max_examples=500, deadline=None)
@given(stored_values(), st.integers(0, 400), st.integers(0, 255))
def test_damaged_values_never_pass_as_something_else(value, at, byte):
    damaged = bytearray(value)
    damaged[at % len(damaged)] = byte
    damaged = bytes(damaged)
    native = native_copies([damaged], [DUE], NOW)[0]
    try:
        reference = delivery_copy_py(decode_value(b"k", damaged), DUE, NOW)
    except CorruptRecordError:
        assert native is None
        return
    if native is not None:
        assert commitlog_bytes(native) == commitlog_bytes(reference)


def test_the_common_value_takes_the_native_path_and_odd_ones_do_not():
    plain = encode_value(Message("orders", b"x" * 100, tags="t", keys=["k"],
                                 msg_id="0123456789ABCDEF0123456789ABCDEF"), 1 << 20)
    packed = encode_value(Message("orders", b"x" * 1000,
                                  msg_id="0123456789ABCDEF0123456789ABCDEF"), 64)
    copies = native_copies([plain, packed, b"", b"\x01" * 40], [DUE] * 4, NOW)
    assert copies[0] is not None and copies[1:] == [None, None, None]
    assert copies[0].encoded_properties.endswith(
        f"TIMER_OUT_MS\x01{DUE}\x02TIMER_DEQUEUE_MS\x01{NOW}\x02".encode())
    full = delivery_copies([b"k1", b"k2"], [plain, packed], [DUE, DUE], NOW)
    assert full[1].body == b"x" * 1000  # the lz4 body came through the reference
    assert full[0].to_message().properties["TIMER_OUT_MS"] == str(DUE)
