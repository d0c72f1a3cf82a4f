"""The RocksDB value codec: round trip, compression choice, corrupt values."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocks_timer.errors import CorruptRecordError, InvalidMessageError
from rocks_timer.message import Message
from rocks_timer.timer import values as V

KEY = b"\x00" * 8 + b"\x01t" + b"\x11" * 16
prop_text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02",
                                           blacklist_categories=("Cs",)), min_size=1, max_size=20)
words = st.text(alphabet="abcdefghijkXYZ019_-", min_size=1, max_size=8)
messages = st.builds(
    Message,
    topic=st.text(alphabet="abcXYZ019_-%|", min_size=1, max_size=40),
    body=st.one_of(st.binary(max_size=2000), st.binary(max_size=8).map(lambda b: b * 300)),
    tags=st.one_of(st.none(), words),
    keys=st.lists(words, max_size=3).map(tuple),
    flag=st.integers(-(1 << 31), (1 << 31) - 1),
    properties=st.dictionaries(prop_text.filter(lambda s: s not in ("TAGS", "KEYS", "UNIQ_KEY")),
                               prop_text, max_size=5),
    msg_id=st.binary(min_size=16, max_size=16).map(lambda b: b.hex().upper()),
    queue_id=st.one_of(st.none(), st.integers(0, 1 << 20)),
    born_ms=st.one_of(st.none(), st.integers(0, 1 << 50)),
    reconsume_times=st.integers(0, 1000),
)


def test_header_size():
    assert V.HEADER.size == V.SIZE == 36


@given(messages, st.sampled_from([0, 64, 512, 1 << 30]))
def test_round_trip(message, threshold):
    raw = V.encode_value(message, threshold)
    assert V.decode_value(KEY, raw) == message
    info = V.peek_value(KEY, raw)
    assert info.body_size == len(message.body)
    assert info.queue_id == (message.queue_id or 0)
    assert info.tags == message.tags


def test_large_compressible_body_is_compressed():
    message = Message(topic="t", body=b"abcd" * 1000, msg_id="AB" * 16)
    raw = V.encode_value(message, 512)
    assert raw[1] & V.FLAG_LZ4
    assert len(raw) < 1000
    assert V.decode_value(KEY, raw).body == message.body


def test_small_or_incompressible_body_is_plain():
    small = Message(topic="t", body=b"a" * 100, msg_id="AB" * 16)
    assert V.encode_value(small, 512)[1] == 0
    noise = Message(topic="t", body=os.urandom(4096), msg_id="AB" * 16)
    raw = V.encode_value(noise, 512)
    assert raw[1] == 0
    assert raw.endswith(noise.body)


def _compressed_value() -> bytes:
    return V.encode_value(Message(topic="t", body=b"xyz" * 500, tags="A", msg_id="CD" * 16), 16)


def _corruptions():
    good = _compressed_value()
    plain = V.encode_value(Message(topic="t", body=b"hi", msg_id="CD" * 16), 512)
    header_end = V.SIZE
    return {
        "empty": b"",
        "truncated header": good[:10],
        "truncated body": good[:-1],
        "bad version": bytes([9]) + good[1:],
        "bad flags": good[:1] + bytes([0x80]) + good[2:],
        "bad presence": good[:2] + bytes([0x40]) + good[3:],
        "lz4 garbage": good[:-20] + b"\xff" * 20,
        "plain length mismatch": plain[:1] + b"\x01" + plain[2:],
        "bad utf-8 topic": plain[:header_end] + b"\xff" + plain[header_end + 1:],
    }


@pytest.mark.parametrize("case", sorted(_corruptions()))
def test_corrupt_values_raise_naming_the_key(case):
    raw = _corruptions()[case]
    with pytest.raises(CorruptRecordError) as info:
        V.decode_value(KEY, raw)
    assert KEY.hex() in str(info.value)
    assert info.value.where == KEY.hex()
    assert info.value.raw == raw


def test_out_of_range_fields_are_rejected():
    with pytest.raises(InvalidMessageError):
        V.encode_value(Message(topic="t", flag=1 << 31, msg_id="AB" * 16), 512)
    with pytest.raises(InvalidMessageError):
        V.encode_value(Message(topic="t" * 256, msg_id="AB" * 16), 512)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["KEYS", "a", "TAGS", "xKEYS"]),
                       st.sampled_from(["k1", "k1 k2", " k3  k4 ", "KEYS", "v"]), max_size=3),
       st.sampled_from([(), ("p",), ("p", "q", "p")]))
def test_peek_keys_reads_what_decoding_reads(props, keys):
    raw = V.encode_value(Message("orders", b"x", keys=keys, properties=props), 1 << 20)
    assert V.peek_keys(b"k", raw) == V.decode_value(b"k", raw).keys
