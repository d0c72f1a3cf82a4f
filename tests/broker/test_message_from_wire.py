"""``Message.from_wire`` (a front's decoded send, made without the constructor's generic checks)
against the constructor: the same message, field for field, properties in the same order and
encoded the same, for any properties; anything not of the decoded types takes the constructor
(the same message, or the same error)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocks_timer.errors import InvalidMessageError
from rocks_timer.message import Message

NAMES = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "a"]) | st.text(max_size=5)
VALUES = st.sampled_from(["", " ", "a  b ", "k1 k2", "0a0b0c0d0e0f10111213141516170001",
                          "fd00abc"]) | st.text(max_size=12)


def same(topic, body, properties, **fields) -> Message:
    made = Message(topic=topic, body=body, properties=dict(properties), **fields)
    fast = Message.from_wire(topic, body, dict(properties), **fields)
    assert fast == made
    assert vars(fast) == {k: v for k, v in vars(made).items() if not k.startswith("_")}
    assert list(fast.properties.items()) == list(made.properties.items())
    assert fast.encoded_properties == made.encoded_properties
    return fast


@settings(max_examples=500, deadline=None)
@given(properties=st.dictionaries(NAMES, VALUES, max_size=6), body=st.binary(max_size=16),
       flag=st.integers(-2**31, 2**31 - 1), queue_id=st.none() | st.integers(0, 7),
       born_ms=st.none() | st.integers(1, 2**62), reconsume=st.integers(0, 20))
def test_from_wire_is_the_constructors_message(properties, body, flag, queue_id, born_ms,
                                               reconsume):
    same("orders", body, properties, flag=flag, queue_id=queue_id, born_ms=born_ms,
         reconsume_times=reconsume)


def test_keys_tags_and_the_id_are_normalised_as_the_constructor_does():
    fast = same("orders", b"x", {"KEYS": " a  b ", "TAGS": "", "UNIQ_KEY": "0a0b"})
    assert (fast.keys, fast.tags, fast.msg_id) == (("a", "b"), None, "0A0B")
    assert fast.properties["KEYS"] == "a b"


def test_parts_of_other_types_take_the_constructor():
    assert same("orders", bytearray(b"x"), {"a": "b"}).body == b"x"
    assert same("orders", "text", {"a": "b"}).body == b"text"
    with pytest.raises(InvalidMessageError):
        Message.from_wire("orders", b"x", {"a": 1})
    with pytest.raises(InvalidMessageError):
        Message.from_wire("orders", 5, {"a": "b"})
