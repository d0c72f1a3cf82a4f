"""A pulled page in the 4.x clients' V1 layout: the native ``client_records``
(rocks_timer/_native/client_records.c) gives exactly the bytes of its Python reference
``client_records_py``, and both the bytes ``encode_for_client`` gives message by message, for
pages read by ``Broker.pull_batch`` from a real store (unicode properties, empty and
large bodies, flags, born times, reconsume counts, delivered timer copies); a stored
``CLIENT_UNIQ_KEY`` still shows as the client's UNIQ_KEY; a bad index is refused by both."""
from __future__ import annotations

import random
import struct
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocks_timer import Broker, BrokerConfig, ManualClock, Message
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


def test_a_client_message_id_is_shown_as_the_uniq_key(broker):
    long_id = "AC11000100002A9F0000000000000000000000000000000000000001"  # 56 digits
    broker.send_batch([Message(topic="C", body=b"one", queue_id=0,
                               properties={"CLIENT_UNIQ_KEY": long_id}),
                       Message(topic="C", body=b"two", queue_id=0)])
    batch = broker.pull_batch("C", 0, 0, 10)
    data = R.encode_page_for_client(batch, HOST, PORT)
    assert data == per_message(batch)
    assert b"UNIQ_KEY\x01" + long_id.encode() in data and b"CLIENT_UNIQ_KEY" not in data


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
    for field, value in [(1, len(blob)), (2, 10), (4, 1 << 40), (3, -1), (1, -5)]:
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
