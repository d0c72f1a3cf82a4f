"""A pulled page in the 4.x clients' V1 layout: the native ``client_records``
(rocks_timer/_native/client_records.c) gives exactly the bytes of its Python reference
``client_records_py``, and both the bytes ``encode_for_client`` gives message by message, for
pages read by ``Broker.pull_batch`` from a real store (unicode properties, empty and
large bodies, flags, born times, reconsume counts, delivered timer copies); a stored
``CLIENT_UNIQ_KEY`` shows as the client's UNIQ_KEY, renamed on the bytes by both (or declined by
both, then message by message) for any property string; a bad index is refused by both, and
junk never gets a different answer from the two."""
from __future__ import annotations

import random
import struct
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocks_timer import Broker, BrokerConfig, ManualClock, Message
from rocks_timer.consume_read import PulledBatch
from rocks_timer.remoting import records as R

START_MS = 1_800_000_000_000
HOST = bytes([10, 1, 2, 3])
PORT = 10_911
needs_native = pytest.mark.skipif(R._native_client_records is None,
                                  reason="no C extension built")

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"),
               min_size=1, max_size=12)


def per_message(batch, host=HOST, port=PORT) -> bytes:
    return b"".join(R.encode_for_client(m, host, port) for m in batch.messages())


@pytest.fixture
def broker(tmp_path):
    clock = ManualClock(START_MS)
    broker = Broker.open(tmp_path / "data", BrokerConfig(), clock=clock)
    yield broker
    broker.close()


def fill(broker, rng: random.Random, count: int) -> None:
    messages = []
    for i in range(count):
        body = rng.choice([b"", b"x", rng.randbytes(rng.randrange(1, 3000))])
        props = {"TAGS": rng.choice(["a", "b", "标签"]), "KEYS": f"k{i} other",
                 "user-π": "värde" * rng.randrange(0, 4) or "v"}
        messages.append(Message(topic=rng.choice(["T", "T_other"]), body=body, properties=props,
                                flag=rng.randrange(0, 1 << 31), queue_id=rng.randrange(4),
                                born_ms=START_MS - rng.randrange(0, 10**6),
                                reconsume_times=rng.randrange(0, 17)))
    broker.send_batch(messages)


def pages(broker, topic: str, size: int):
    for q in range(4):
        offset = 0
        while True:
            batch = broker.pull_batch(topic, q, offset, size)
            if not len(batch):
                break
            yield batch
            offset = batch.next_offset


@pytest.mark.parametrize("page", [1, 7, 32])
def test_pages_match_the_per_message_encoding_byte_for_byte(broker, page):
    fill(broker, random.Random(page), 150)
    seen = 0
    for topic in ("T", "T_other"):
        for batch in pages(broker, topic, page):
            blob, index = batch.records()
            expected = per_message(batch)
            assert R.client_records_py(blob, index, HOST, PORT) == expected
            if R._native_client_records is not None:
                assert R._native_client_records(blob, index, HOST, PORT) == expected
            assert R.encode_page_for_client(batch, HOST, PORT) == expected
            seen += len(batch)
    assert seen == 150


def test_delivered_timer_copies_match_too(broker):
    now = broker.clock.now_ms()
    broker.send_batch([Message(topic="D", body=f"t{i}".encode(), keys=[f"b{i}"],
                               properties={"TIMER_DELIVER_MS": str(now + 1000 + i)})
                       for i in range(50)])
    broker.clock.advance(5_000)
    broker.tick()
    batches = list(pages(broker, "D", 32))
    assert sum(len(b) for b in batches) == 50
    for batch in batches:
        blob, index = batch.records()
        assert R.client_records(blob, index, HOST, PORT) == per_message(batch)
        assert R.client_records_py(blob, index, HOST, PORT) == per_message(batch)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(text, st.binary(max_size=200), st.dictionaries(text, text, max_size=3),
                          st.integers(0, 65535)), min_size=1, max_size=8))
def test_generated_pages_match(tmp_path_factory, specs):
    path = tmp_path_factory.mktemp("gen")
    broker = Broker.open(path / "data", BrokerConfig(), clock=ManualClock(START_MS))
    try:
        topic = "G"
        broker.send_batch([Message(topic=topic, body=body, properties=props, queue_id=0)
                           for _, body, props, _ in specs])
        batch = broker.pull_batch(topic, 0, 0, 100)
        assert len(batch) == len(specs)
        blob, index = batch.records()
        for _, _, _, port in specs:
            expected = per_message(batch, HOST, port)
            assert R.client_records_py(blob, index, HOST, port) == expected
            if R._native_client_records is not None:
                assert R._native_client_records(blob, index, HOST, port) == expected
    finally:
        broker.close()


LONG_ID = "AC11000100002A9F0000000000000000000000000000000000000001"  # 56 digits


def test_a_client_message_id_is_shown_as_the_uniq_key(broker):
    broker.send_batch([Message(topic="C", body=b"one", queue_id=0, keys=["k1", "k2"],
                               properties={"CLIENT_UNIQ_KEY": LONG_ID, "TAGS": "t"}),
                       Message(topic="C", body=b"two", queue_id=0)])
    batch = broker.pull_batch("C", 0, 0, 10)
    blob, index = batch.records()
    data = R.encode_page_for_client(batch, HOST, PORT)
    assert data == per_message(batch)
    assert R.client_records_py(blob, index, HOST, PORT) == data  # renamed on the bytes
    if R._native_client_records is not None:
        assert R._native_client_records(blob, index, HOST, PORT) == data
    assert b"UNIQ_KEY\x01" + LONG_ID.encode() in data and b"CLIENT_UNIQ_KEY" not in data
    shown = decoded_properties(data)
    assert shown[0]["UNIQ_KEY"] == LONG_ID and shown[0]["KEYS"] == "k1 k2"
    assert "CLIENT_UNIQ_KEY" not in shown[0] and len(shown[1]["UNIQ_KEY"]) == 32


def decoded_properties(data: bytes) -> list[dict[str, str]]:
    """The property maps of V1 records as a client reads them (sizes checked on the way)."""
    out, at = [], 0
    while at < len(data):
        size, body_len = struct.unpack_from(">i", data, at)[0], struct.unpack_from(">i", data,
                                                                                  at + 84)[0]
        topic_at = at + 88 + body_len + 1
        props_at = topic_at + data[topic_at - 1] + 2
        (props_len,) = struct.unpack_from(">H", data, props_at - 2)
        assert props_at + props_len == at + size
        raw = data[props_at:props_at + props_len].decode()
        out.append(dict(p.split("\x01", 1) for p in raw.split("\x02") if p))
        at += size
    return out


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.dictionaries(text.map("u-".__add__), text, max_size=4), st.booleans(),
                          st.sampled_from(["", "k", " a  b ", "a b", "  "]),
                          st.text("0123456789ABCDEFabcdef", min_size=1, max_size=64)),
                min_size=1, max_size=6))
def test_stored_client_ids_are_renamed_as_message_by_message(tmp_path_factory, specs):
    """Pages from a real store whose messages carry CLIENT_UNIQ_KEY (or not), other properties,
    KEYS written any way and an explicit UNIQ_KEY or none: the page's bytes are those of the
    per-message encoding, and the native and Python encoders answer the same."""
    path = tmp_path_factory.mktemp("client-ids")
    broker = Broker.open(path / "data", BrokerConfig(), clock=ManualClock(START_MS))
    try:
        messages = []
        for props, with_uniq, keys, client_id in specs:
            props = dict(props)
            props["CLIENT_UNIQ_KEY"] = client_id
            if keys:
                props["KEYS"] = keys
            if with_uniq:
                props["UNIQ_KEY"] = "0A0B0C0D0E0F10111213141516171819"
            messages.append(Message(topic="U", body=b"b", properties=props, queue_id=0))
        broker.send_batch(messages)
        batch = broker.pull_batch("U", 0, 0, 100)
        blob, index = batch.records()
        expected = per_message(batch)
        assert R.encode_page_for_client(batch, HOST, PORT) == expected
        reference = R.client_records_py(blob, index, HOST, PORT)
        assert reference in (None, expected)
        if R._native_client_records is not None:
            assert R._native_client_records(blob, index, HOST, PORT) == reference
    finally:
        broker.close()


def record_with(props: bytes, body: bytes = b"body", topic: bytes = b"T") -> bytes:
    """One hand-made stored record (its other header fields zero) with ``props`` as its properties."""
    head = bytearray(84) + struct.pack(">i", len(body)) + body + bytes([len(topic)]) + topic
    record = head + struct.pack(">H", len(props)) + props
    struct.pack_into(">iI", record, 0, len(record), R.MESSAGE_MAGIC)
    return bytes(record)


def row_of(record: bytes, at: int, entry: int = 0) -> list[int]:
    body_len = struct.unpack_from(">i", record, 84)[0]
    topic_at = 88 + body_len + 1
    props_at = topic_at + record[topic_at - 1] + 2
    return [entry, at, len(record), at + 88, body_len, at + topic_at, record[topic_at - 1],
            at + props_at, len(record) - props_at]


# property strings near the rename's edges: entries made of the names it looks at and values
# with spaces and separators, sometimes repeated or followed by a fragment; and plain junk
names = st.sampled_from(["CLIENT_UNIQ_KEY", "UNIQ_KEY", "KEYS", "TAGS", "a", "é", ""])
values = st.sampled_from(["x", LONG_ID, "a b", " a", "a ", "a  b", "  ", "", "\x01", "v\x01w"])
entries = st.lists(st.tuples(names, values), max_size=6).map(
    lambda pairs: "".join(f"{n}\x01{v}\x02" for n, v in pairs).encode())
prop_bytes = st.one_of(
    entries,
    st.tuples(entries, st.sampled_from(["", "z", "KEYS\x01y", "\x02"])).map(
        lambda pair: pair[0] + pair[1].encode()),
    st.lists(st.sampled_from([b"CLIENT_UNIQ_KEY", b"UNIQ_KEY", b"KEYS", b"\x01", b"\x02", b" ",
                              b"a", b"\xc3\xa9"]), max_size=40).map(b"".join))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(prop_bytes, min_size=1, max_size=4), st.booleans())
def test_any_property_string_gets_the_same_answer_from_both(props_list, force_client):
    """Arbitrary property strings (valid UTF-8, any shape): native and Python give the same
    bytes or both decline; when a record with CLIENT_UNIQ_KEY is renamed on the bytes, the page
    is exactly what ``encode_for_client`` gives message by message."""
    if force_client:
        props_list = [b"CLIENT_UNIQ_KEY\x01" + LONG_ID.encode() + b"\x02" + p
                      for p in props_list]
    blob, rows = b"", array("q")
    for i, props in enumerate(props_list):
        record = record_with(props)
        rows.extend(row_of(record, len(blob), i))
        blob += record
    index = rows.tobytes()
    reference = R.client_records_py(blob, index, HOST, PORT)
    if R._native_client_records is not None:
        assert R._native_client_records(blob, index, HOST, PORT) == reference
    batch = PulledBatch("T", 0, 0, len(props_list), blob, index)
    client_entry = b"CLIENT_UNIQ_KEY\x01"
    renamed = [p.startswith(client_entry) or b"\x02" + client_entry in p for p in props_list]
    if all(renamed) and reference is not None:
        assert reference == per_message(batch)
    assert R.encode_page_for_client(batch, HOST, PORT) == (
        reference if reference is not None else per_message(batch))


CLIENT = "CLIENT_UNIQ_KEY\x01" + LONG_ID + "\x02"


@pytest.mark.parametrize("props, shown", [
    (CLIENT + "UNIQ_KEY\x01A\x02TAGS\x01t\x02", "UNIQ_KEY\x01" + LONG_ID + "\x02TAGS\x01t\x02"),
    ("TAGS\x01t\x02" + CLIENT, "TAGS\x01t\x02UNIQ_KEY\x01" + LONG_ID + "\x02"),
    ("UNIQ_KEY\x01A\x02KEYS\x01a b\x02" + CLIENT,
     "UNIQ_KEY\x01" + LONG_ID + "\x02KEYS\x01a b\x02"),
    ("KEYS\x01  \x02" + CLIENT, "KEYS\x01  \x02UNIQ_KEY\x01" + LONG_ID + "\x02"),
    ("KEYS\x01 a\x02" + CLIENT, None),           # the reader would normalise KEYS
    ("KEYS\x01a \x02" + CLIENT, None),
    ("KEYS\x01a  b\x02" + CLIENT, None),
    ("TAGS\x01t\x02TAGS\x01u\x02" + CLIENT, None),  # a repeated name
    (CLIENT + CLIENT, None),
    ("TAGS\x01t\x01u\x02" + CLIENT, None),        # a second separator
    ("TAGS\x01\x02" + CLIENT, None),               # an empty value
    ("\x01t\x02" + CLIENT, None),                  # an empty name
    ("TAGS\x02" + CLIENT, None),                   # no separator
    (CLIENT + "TAGS\x01t", None),                  # a last entry without its end
    ("CLIENT_UNIQ_KEY\x01\x02", None),
    ("XCLIENT_UNIQ_KEY\x01v\x02", "XCLIENT_UNIQ_KEY\x01v\x02"),  # not the name: unchanged
    ("T\x01CLIENT_UNIQ_KEY\x01v\x02", "T\x01CLIENT_UNIQ_KEY\x01v\x02"),
])
def test_the_rename_and_its_refusals(props, shown):
    """Both encoders rename exactly the form rtimer writes and decline the rest (the page then
    goes message by message); a page either way matches the per-message encoding when renamed."""
    assert R.shown_properties(props.encode()) == (shown.encode() if shown else None)
    record = record_with(props.encode())
    index = array("q", row_of(record, 0)).tobytes()
    answers = [R.client_records_py(record, index, HOST, PORT)]
    if R._native_client_records is not None:
        answers.append(R._native_client_records(record, index, HOST, PORT))
    for answer in answers:
        assert answer == answers[0]
        assert (answer is None) == (shown is None)
    if shown is not None:
        assert answers[0].endswith(shown.encode())
        assert struct.unpack_from(">i", answers[0])[0] == len(answers[0])
        if "CLIENT_UNIQ_KEY\x01" + LONG_ID in props:
            assert answers[0] == per_message(PulledBatch("T", 0, 0, 1, record, index))


def test_a_property_string_past_the_entry_bound_goes_message_by_message():
    many = b"".join(b"p%d\x01v\x02" % i for i in range(R.MAX_RENAMED_ENTRIES - 1))
    client = b"CLIENT_UNIQ_KEY\x01" + LONG_ID.encode() + b"\x02"
    for props, renamed in [(many + client, True), (many + b"q\x01v\x02" + client, False)]:
        record = record_with(props)
        index = array("q", row_of(record, 0)).tobytes()
        answers = [R.client_records_py(record, index, HOST, PORT)]
        if R._native_client_records is not None:
            answers.append(R._native_client_records(record, index, HOST, PORT))
        for answer in answers:
            assert (answer is not None) == renamed
        batch = PulledBatch("T", 0, 0, 1, record, index)
        assert R.encode_page_for_client(batch, HOST, PORT) == per_message(batch)


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(-5, 320), min_size=0, max_size=27))
def test_junk_gets_the_same_answer_from_both(blob, fields):
    """Random buffers and index rows (most refused, some whole records of junk): the C never
    crashes and answers what the reference answers, error or bytes or None."""
    index = array("q", fields[:len(fields) - len(fields) % 9]).tobytes()
    answers = []
    for encode in (R.client_records_py, R._native_client_records):
        try:
            answers.append(("ok", encode(blob, index, HOST, PORT)))
        except ValueError:
            answers.append(("refused", None))
    assert answers[0] == answers[1]


@pytest.mark.parametrize("encode", [
    R.client_records_py,
    pytest.param(R._native_client_records, marks=needs_native, id="native")])
def test_a_bad_index_or_address_is_refused(broker, encode):
    fill(broker, random.Random(3), 4)
    batch = broker.pull_batch("T", 0, 0, 10) if broker.max_offset("T", 0) else \
        broker.pull_batch("T_other", 0, 0, 10)
    blob, index = batch.records()
    rows = array("q", bytes(index))
    assert encode(blob, index, HOST, PORT)
    with pytest.raises(ValueError):
        encode(blob, index, b"\x01\x02\x03", PORT)
    with pytest.raises(ValueError):
        encode(blob, index, HOST, 70_000)
    with pytest.raises(ValueError):
        encode(blob, rows.tobytes()[:-8], HOST, PORT)  # not whole rows
    for field, value in [(1, len(blob)), (2, 10), (4, 1 << 40), (3, -1), (1, -5),
                         (7, 0), (8, -1), (8, 1 << 20)]:
        bad = array("q", rows)
        bad[field] = value
        with pytest.raises(ValueError):
            encode(blob, bad.tobytes(), HOST, PORT)
    assert encode(b"", b"", HOST, PORT) == b""


def test_the_fields_a_client_reads_differently():
    """The five fields set for the client, on one hand-made record."""
    body = b"hello"
    record = bytearray(R._HEAD.size + len(body) + 1 + 1 + 2)
    struct.pack_into(">i", record, 0, len(record))
    record[8:12] = b"\xff" * 4
    record[36:40] = b"\x00\x00\x00\x05"
    record[48:56] = record[64:72] = bytes([127, 0, 0, 1, 0, 0, 0x2A, 0x9F])
    record[76:84] = b"\x01" * 8
    struct.pack_into(">i", record, 84, len(body))
    record[88:93] = body
    record[93] = 1
    record[94] = ord("T")
    index = array("q", [0, 0, len(record), 88, len(body), 94, 1, 97, 0]).tobytes()
    for encode in filter(None, (R.client_records_py, R._native_client_records)):
        out = encode(bytes(record), index, HOST, PORT)
        assert struct.unpack_from(">I", out, 8)[0] == R.zlib.crc32(body) & 0x7FFFFFFF
        assert out[36:40] == bytes(4) and out[76:84] == bytes(8)
        assert out[48:56] == HOST + bytes(4) and out[64:72] == HOST + PORT.to_bytes(4, "big")
        assert out[:8] == record[:8] and out[12:36] == record[12:36] and out[84:] == record[84:]


def test_a_page_past_a_mebibyte_matches_too(broker):
    """A page large enough that the native copy runs with the GIL released."""
    rng = random.Random(5)
    broker.send_batch([Message(topic="L", body=rng.randbytes(40_000), queue_id=0, keys=[f"l{i}"])
                       for i in range(40)])
    batch = broker.pull_batch("L", 0, 0, 100)
    assert len(batch) == 40
    blob, index = batch.records()
    assert len(blob) > 1 << 20
    assert R.client_records(blob, index, HOST, PORT) == per_message(batch)
    assert R.client_records_py(blob, index, HOST, PORT) == per_message(batch)
