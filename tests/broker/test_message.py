import re

import pytest
from hypothesis import given, strategies as st

from rocks_timer import InvalidMessageError, Message
from rocks_timer.message import (decode_properties, encode_properties, msg_id_bytes, new_msg_id)

names = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                min_size=1, max_size=20)


@given(st.dictionaries(names, names, max_size=10))
def test_properties_round_trip(props):
    assert decode_properties(encode_properties(props)) == props


def test_properties_string_form():
    assert encode_properties({"A": "1", "B": "2"}) == b"A\x011\x02B\x012\x02"


@pytest.mark.parametrize("raw", [b"A\x01\x02", b"\x011\x02", b"", b"junk"])
def test_degenerate_property_strings_decode_empty(raw):
    assert decode_properties(raw) == {}


def test_msg_ids_are_32_upper_hex_and_unique():
    ids = [new_msg_id() for _ in range(20_000)]
    assert all(re.fullmatch(r"[0-9A-F]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)
    assert len(msg_id_bytes(ids[0])) == 16


def test_msg_id_bytes_rejects_bad_ids():
    with pytest.raises(InvalidMessageError, match="32 hexadecimal"):
        msg_id_bytes("XYZ")


def test_tags_keys_and_id_live_in_properties():
    m = Message("t", b"b", tags="TagA", keys=["k1", "k2"], properties={"x": "1"},
                msg_id="ab" * 16)
    assert m.properties["TAGS"] == "TagA"
    assert m.properties["KEYS"] == "k1 k2"
    assert m.properties["UNIQ_KEY"] == "AB" * 16
    back = Message("t", b"b", properties=dict(m.properties))
    assert (back.tags, back.keys, back.msg_id) == ("TagA", ("k1", "k2"), "AB" * 16)


def test_body_must_be_bytes():
    assert Message("t", "text").body == b"text"
    with pytest.raises(InvalidMessageError):
        Message("t", 12)


def test_payload_size_counts_body_properties_topic():
    m = Message("ab", b"xyz", properties={"k": "v"})
    assert m.payload_size == 3 + len(b"k\x01v\x02") + 2
