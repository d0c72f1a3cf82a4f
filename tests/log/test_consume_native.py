"""The native ``read_records`` (rocks_timer/_native/consume.c) gives exactly what its Python
reference ``read_records_py`` gives, byte for byte: the blob, the index and the problems, for
generated records (unicode topics and properties, empty bodies) in several segments, with
damage (flipped bytes, bad sizes, invalid UTF-8 under a valid CRC, offsets outside the log,
records cut by the end of a file, neighbours merged into one read). And a page's messages are
the ``Message`` objects ``decode_record`` gives."""
from __future__ import annotations

import os
import random
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocks_timer import Message
from rocks_timer import consume_read as C
from rocks_timer.consumequeue import ENTRY
from rocks_timer.record import decode_record, encode_record

pytestmark = pytest.mark.skipif(C._native_read is None, reason="no C extension built")

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"),
               min_size=1, max_size=12)
messages = st.lists(st.tuples(text, st.binary(max_size=300),
                              st.dictionaries(text, text, max_size=4),
                              st.sampled_from(["ok", "ok", "ok", "flip", "size", "utf8-topic",
                                               "utf8-props", "outside", "zero", "past-end",
                                               "dup", "short-file"])),
                    min_size=0, max_size=14)


def _recrc(record: bytearray) -> None:
    struct.pack_into(">I", record, 8, zlib.crc32(bytes(record[12:])))


def build(tmp_path, specs, segment_bytes: int):
    """Records of ``specs`` written across segment files of about ``segment_bytes``; the
    entries point at them (or, per damage, elsewhere). Returns (entries, starts, fds, written,
    fds to close)."""
    starts, fds, written, files = [], [], [], []
    entries = []
    data, start = bytearray(), 1000  # the log starts past 0: offset 0 is outside it

    def seal():
        nonlocal data, start
        path = tmp_path / f"{start:020d}"
        path.write_bytes(bytes(data))
        fd = os.open(path, os.O_RDONLY)
        files.append(fd)
        starts.append(start)
        fds.append(fd)
        written.append(len(data))
        start += max(len(data), 1) + 17
        data = bytearray()

    short = None
    for n, (topic, body, props, damage) in enumerate(specs):
        msg = Message(topic=topic, body=body, properties=props, msg_id=f"{n:032X}".lower())
        record = bytearray(encode_record(msg, queue_id=n % 3, queue_offset=n,
                                         physical_offset=start + len(data), store_ms=7 + n,
                                         born_ms=5 + n))
        if damage == "flip":
            record[len(record) // 2 + 6] ^= 0x40
        elif damage == "utf8-topic":
            at = 84 + 4 + len(body) + 1
            record[at] = 0xFF
            _recrc(record)
        elif damage == "utf8-props" and props:
            record[-2] = 0xC0
            _recrc(record)
        offset, size = start + len(data), len(record)
        data += record
        if damage == "size":
            size = size - 1 if n % 2 else 50
        elif damage == "outside":
            offset = 10 if n % 2 else 10**12
        elif damage == "zero":
            offset, size = 0, 0
        elif damage == "past-end":
            size += 5000
        elif damage == "dup" and entries:
            offset, size = entries[-1][0], entries[-1][1]
        elif damage == "short-file":
            short = (len(starts), len(data))  # the file is cut inside this record below
        entries.append((offset, size))
        if len(data) >= segment_bytes:
            seal()
    if data or not starts:
        seal()
    if short is not None and short[0] < len(starts):
        seg, end = short
        os.truncate(os.readlink(f"/proc/self/fd/{fds[seg]}"), max(0, end - 30))
    packed = b"".join(ENTRY.pack(o, s, 0) for o, s in entries)
    return packed, starts, fds, written, files


@settings(max_examples=150, deadline=None)
@given(specs=messages, segment_bytes=st.sampled_from([200, 700, 5000, 10**6]))
def test_native_equals_reference(tmp_path_factory, specs, segment_bytes):
    tmp = tmp_path_factory.mktemp("cl")
    entries, starts, fds, written, files = build(tmp, specs, segment_bytes)
    try:
        native = C._native_read(entries, starts, fds, written)
        reference = C.read_records_py(entries, starts, fds, written)
        assert native == reference
        blob, index, problems = native
        bad = {i for i, (_t, _b, props, damage) in enumerate(specs)
               if damage in ("flip", "utf8-topic", "size", "outside", "zero", "past-end")
               or (damage == "utf8-props" and props)}
        assert bad <= {i for i, _ in problems}
        assert {i for i, code in problems if code == "outside"} >= {
            i for i, spec in enumerate(specs) if spec[3] in ("outside", "zero")}
        batch = C.PulledBatch("t", 0, 0, len(specs), blob, index)
        ok = [i for i in range(len(specs)) if i not in dict(problems)]
        assert [batch.entry(j) for j in range(len(batch))] == ok
        for j, i in enumerate(ok):
            offset, size = ENTRY.unpack_from(entries, 20 * i)[:2]
            s = max(k for k in range(len(starts)) if starts[k] <= offset)
            expected = decode_record(os.pread(fds[s], size, offset - starts[s]), offset)
            assert batch.message(j) == expected
            assert batch.message(j).__dict__.keys() >= {"topic", "properties"}
            assert batch.body(j) == expected.body == batch[j].body
            view = batch[j]
            assert (view.topic, view.queue_id, view.flag, view.queue_offset,
                    view.commitlog_offset, view.born_ms, view.store_ms, view.reconsume_times,
                    dict(view.properties), view.tags, view.keys, view.msg_id) == (
                expected.topic, expected.queue_id, expected.flag, expected.queue_offset,
                expected.commitlog_offset, expected.born_ms, expected.store_ms,
                expected.reconsume_times, dict(expected.properties), expected.tags,
                expected.keys, expected.msg_id)
        assert batch.bodies() == [m.body for m in batch.messages()]
    finally:
        for fd in files:
            os.close(fd)


def test_large_page_merged_reads_equal_reference(tmp_path):
    """4,096 neighbours in three segments (merged into few preads), a few damaged."""
    rng = random.Random(5)
    specs = [("orders", rng.randbytes(rng.randrange(0, 2000)), {"KEYS": "a  b", "TAGS": "x"},
              "flip" if i % 997 == 3 else "ok") for i in range(4096)]
    entries, starts, fds, written, files = build(tmp_path, specs, 3 << 20)
    try:
        assert len(starts) >= 2
        native = C._native_read(entries, starts, fds, written)
        assert native == C.read_records_py(entries, starts, fds, written)
        assert [i for i, _ in native[2]] == [i for i in range(4096) if i % 997 == 3]
    finally:
        for fd in files:
            os.close(fd)


def test_bad_arguments_are_errors():
    with pytest.raises(ValueError):
        C._native_read(b"x" * 21, [], [], [])
    with pytest.raises(ValueError):
        C._native_read(b"", [0], [], [0])
    with pytest.raises(OSError):  # a read that fails is an error, as os.pread's
        C._native_read(ENTRY.pack(0, 100, 0), [0], [987654], [1000])


@pytest.fixture(params=["native", "python"])
def reader(request, monkeypatch):
    import rocks_timer.message_store as store_module
    if request.param == "python":
        monkeypatch.setattr(store_module, "read_records", C.read_records_py)
    return request.param


def test_pull_batch_through_the_broker(tmp_path, reader):
    """``Broker.pull_batch``: the same messages as one ``get_message`` per entry, a corrupt
    record skipped, counted and passed, the byte cut, an unknown queue empty."""
    from rocks_timer import Broker, BrokerConfig, ManualClock
    clock = ManualClock(1_767_225_600_000)
    with Broker.open(tmp_path / "b", BrokerConfig(), clock=clock) as broker:
        sent = [broker.send(Message("t", bytes([i]) * (100 + i), keys=f"k{i}",
                                    properties={"TAGS": "a"})) for i in range(20)]
        assert len(broker.pull_batch("none")) == 0 and broker.pull_batch("none").next_offset == 0
        entries = broker.messages.consume_queue("t", 0).entries(0, 20)
        expected = [broker.messages.get_message(e.commitlog_offset, e.size) for e in entries]
        batch = broker.pull_batch("t", 0, 0)
        assert batch.messages() == expected == broker.pull("t", 0, 0, 100)
        assert [m.msg_id for m in batch] == [s.msg_id for s in sent]
        assert batch.next_offset == 20 and len(broker.pull_batch("t", 0, 20)) == 0
        cut = broker.pull_batch("t", 0, 3, max_bytes=1)  # at least one
        assert len(cut) == 1 and cut.next_offset == 4 and cut.bodies() == [expected[3].body]
        # a flipped body byte: skipped, counted, and the next offset passes it
        segment = broker.messages.commitlog.segments()[0]
        os.pwrite(segment.fd, b"\xff", entries[5].commitlog_offset + 95)
        batch = broker.pull_batch("t", 0, 0)
        assert [m.queue_offset for m in batch] == [i for i in range(20) if i != 5]
        assert batch.next_offset == 20 and broker.messages.corrupt_reads == 1
