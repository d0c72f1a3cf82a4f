"""The writer's batch encoder: the C version against the Python reference, and both against the
record codec, on random batches (several queues, segment limits, level messages, odd tags)."""
import random
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from rocks_timer import Message
from rocks_timer.batch_encoder import META, encode_batch_native, encode_batch_py, native
from rocks_timer.consumequeue import ENTRY
from rocks_timer.message import SCHEDULE_TOPIC
from rocks_timer.record import decode_record, java_string_hash

needs_native = pytest.mark.skipif(native is None, reason="the C encoder was not built")

TAGS = [None, "TagA", "\U0001F600x", "é", "a" * 40]


def make_batch(seed: int, n: int) -> list[Message]:
    rng = random.Random(seed)
    msgs = []
    for i in range(n):
        topic = rng.choice(["orders", "orders", "pay-ments", "tópico", SCHEDULE_TOPIC])
        props = {"DELAY": str(rng.randint(0, 20))} if topic == SCHEDULE_TOPIC else {}
        msgs.append(Message(topic, rng.randbytes(rng.randint(0, 2000)), tags=rng.choice(TAGS),
                            properties=props, msg_id=f"{seed:08X}{i:024X}",
                            queue_id=rng.choice([None, 0, 1, 3]), flag=rng.randint(-5, 5),
                            born_ms=rng.choice([None, rng.randint(0, 2**42)]),
                            reconsume_times=rng.randint(0, 16)))
    return msgs


def run(encoder, msgs, first, start, limit, known):
    assigned = dict(known)
    looked_up = []

    def lookup(key):
        looked_up.append(key)
        return 1000 + key[1]

    batch = encoder(msgs, first, start, limit, 77_000, assigned, lookup,
                    lambda m: -int(m.properties["DELAY"]))
    return batch, assigned, looked_up


@needs_native
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 40), first=st.integers(0, 5),
       start=st.integers(0, 2**40), room=st.integers(0, 60_000))
def test_native_equals_reference(seed, n, first, start, room):
    msgs = make_batch(seed, n)
    first = min(first, n)
    known = {("orders", 0): 7}
    py = run(encode_batch_py, msgs, first, start, start + room, known)
    c = run(encode_batch_native, msgs, first, start, start + room, known)
    assert py == c  # the same batch, assignments and lookups


def test_records_decode_and_index_themselves():
    msgs = make_batch(3, 30)
    batch, assigned, looked_up = run(encode_batch_py, msgs, 0, 500, 10**9, {("orders", 0): 7})
    assert batch.count == 30 and len(batch.meta) == 30 * META.size
    entries = {q.key: list(ENTRY.iter_unpack(q.entries)) for q in batch.queues}
    seen = {}
    for i, msg in enumerate(msgs):
        queue_offset, position, size, queue_id = META.unpack_from(batch.meta, i * META.size)
        record = decode_record(batch.data[position - 500:position - 500 + size], position)
        assert (record.topic, record.body, record.queue_id) == (msg.topic, msg.body, queue_id)
        assert record.queue_offset == queue_offset and record.store_ms == 77_000
        assert record.born_ms == (77_000 if msg.born_ms is None else msg.born_ms)
        key = (msg.topic, msg.queue_id or 0)
        run_ = next(q for q in batch.queues if q.key == key)
        nth = seen.setdefault(key, 0)
        seen[key] += 1
        assert queue_offset == run_.first_queue_offset + nth
        tags = (-int(msg.properties["DELAY"]) if msg.topic == SCHEDULE_TOPIC
                else java_string_hash(msg.tags) if msg.tags else 0)
        assert entries[key][nth] == (position, size, tags)
    assert assigned[("orders", 0)] == 7 + seen[("orders", 0)]
    assert ("orders", 0) not in looked_up and all(assigned[k] == 1000 + k[1] + seen[k]
                                                  for k in looked_up)


def test_a_batch_stops_where_the_segment_ends():
    msgs = [Message("t", b"x" * 100) for _ in range(10)]
    size = 91 + 100 + 1
    batch, assigned, _ = run(encode_batch_py, msgs, 2, 0, 3 * size + size - 1, {})
    assert batch.count == 3 and len(batch.data) == 3 * size and assigned == {("t", 0): 1003}


@needs_native
def test_a_bad_message_fails_the_batch_and_assigns_nothing():
    msgs = [Message("t", b"x"), Message("t", b"y")]
    object.__setattr__(msgs[1], "flag", 2**40)
    assigned = {("t", 0): 5}
    with pytest.raises(ValueError, match="flag"):
        native.encode_batch(msgs, 0, 0, 10**9, 1, assigned, lambda k: 0, lambda m: 0)
    assert assigned == {("t", 0): 5}


@needs_native
@given(st.binary(max_size=5000))
def test_native_crc32_is_zlibs(data):
    assert native.crc32(data) == zlib.crc32(data)


@needs_native
@given(st.text(max_size=30))
def test_native_java_hash_is_the_reference(text):
    assert native.java_string_hash(text) == java_string_hash(text)


def test_the_native_encoder_is_built():
    """The benchmarks quote the C encoder; a build that silently fell back would mislead."""
    assert native is not None, "rocks_timer/_native/*.c did not build (see setup.py)"


@needs_native
@given(st.dictionaries(st.text(max_size=8), st.text(max_size=30), max_size=6))
def test_native_property_string_is_the_reference(props):
    from rocks_timer.message import encode_properties_py
    assert native.encode_properties(props) == encode_properties_py(props)


def test_property_values_that_are_not_strings_are_formatted_as_before():
    from rocks_timer.message import encode_properties
    assert encode_properties({"a": "b", "n": 1}) == b"a\x01b\x02n\x011\x02"


@pytest.mark.parametrize("prepare", ["py", "native"])
def test_prepare_caches_property_strings_and_flags_what_needs_a_closer_look(prepare):
    from rocks_timer.batch_encoder import prepare_batch_py
    if prepare == "native" and native is None:
        pytest.skip("the C encoder was not built")
    fn = prepare_batch_py if prepare == "py" else native.prepare_batch
    msgs = [Message("t", b"x" * 10, properties={"a": "b"}, msg_id="0" * 32) for _ in range(3)]
    assert fn(msgs, 100, 100) == (30, True)
    assert all(m.__dict__["_encoded_properties"] == b"a\x01b\x02UNIQ_KEY\x01" + b"0" * 32 + b"\x02"
               for m in msgs)
    assert fn(msgs, 9, 100) == (30, False)             # a body over the limit
    assert fn(msgs, 100, 10) == (30, False)            # properties over the limit
    assert fn(msgs + [Message("t", b"yy")], 100, 100) == (32, False)  # no message id
