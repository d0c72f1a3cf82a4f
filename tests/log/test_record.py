import pytest
from hypothesis import given, settings, strategies as st

from rocks_timer import CorruptRecordError, Message
from rocks_timer.record import (FIXED_SIZE, HEADER, HEADER_SIZE, decode_record, encode_record,
                                java_string_hash)

text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
               min_size=1, max_size=12)


def test_layout_sizes():
    assert HEADER.size == HEADER_SIZE == 84
    assert FIXED_SIZE == 91


def test_record_length_is_rocketmq_v1():
    m = Message("topic", b"x" * 10, properties={"a": "b"})
    data = encode_record(m, queue_id=0, queue_offset=0, physical_offset=0, store_ms=1, born_ms=1)
    assert len(data) == 91 + 10 + 5 + len(b"a\x01b\x02")


@settings(max_examples=200)
@given(body=st.binary(max_size=2000), props=st.dictionaries(text, text, max_size=5),
       topic=st.from_regex(r"[a-zA-Z0-9_-]{1,20}", fullmatch=True),
       queue_id=st.integers(0, 1000), queue_offset=st.integers(0, 2**40),
       offset=st.integers(0, 2**40), store_ms=st.integers(0, 2**45), flag=st.integers(0, 2**31 - 1))
def test_record_round_trip(body, props, topic, queue_id, queue_offset, offset, store_ms, flag):
    m = Message(topic, body, properties=props, flag=flag)
    data = encode_record(m, queue_id=queue_id, queue_offset=queue_offset, physical_offset=offset,
                         store_ms=store_ms, born_ms=store_ms - 1)
    back = decode_record(data, offset)
    assert (back.topic, back.body, dict(back.properties), back.flag) == (topic, body, props, flag)
    assert (back.queue_id, back.queue_offset, back.commitlog_offset) == (queue_id, queue_offset,
                                                                         offset)
    assert (back.store_ms, back.born_ms) == (store_ms, store_ms - 1)


@pytest.mark.parametrize("position", [12, 40, 90, 100, -1])
def test_crc_catches_a_flipped_byte_anywhere(position):
    m = Message("topic", b"payload" * 3, properties={"a": "b"})
    data = bytearray(encode_record(m, queue_id=0, queue_offset=0, physical_offset=0, store_ms=1,
                                   born_ms=1))
    data[position] ^= 0x40
    with pytest.raises(CorruptRecordError, match="CRC32"):
        decode_record(bytes(data), 0)


def test_java_string_hash_matches_java():
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("") == 0
    assert java_string_hash("hello world, a long string") == -1695001410  # from Java 17
    assert java_string_hash("\U0001F600") == 1772899
    assert java_string_hash("orders.created") == 811154655
