"""The consumer read path: a page of a ConsumeQueue's messages read into one buffer.

``read_records`` takes the page's packed ConsumeQueue entries and the CommitLog's segments and
returns every record in one ``bytes`` (``blob``), an index row per record that passes the
checks ``decode_record`` makes, and the entries it could not read (not in the log any more, or
corrupt). It is the native ``read_records`` (``rocks_timer/_native/consume.c``: merged preads
and CRC checks with the GIL released) when it was built, else :func:`read_records_py`, its
reference; tests/log/test_consume_native.py holds the two byte for byte equal.

:class:`PulledBatch` is what a consumer gets (``Broker.pull_batch``): nothing per message is
built until asked for. ``batch.bodies()`` slices the bodies out of the buffer, ``batch[i]`` is a
:class:`PulledMessage` view whose properties are decoded when first read, and
``batch.messages()`` builds the same ``Message`` objects ``decode_record`` gives (what
``Broker.pull`` returns). Before this, ``pull`` read and decoded each record on its own (a
pread, a CRC, a property decode and a ``Message`` per message; docs/BENCHMARKS.md).
"""
from __future__ import annotations

import bisect
import os
import struct
from array import array
from collections.abc import Sequence
from types import MappingProxyType

from rocks_timer.consumequeue import ENTRY, ENTRY_SIZE
from rocks_timer.errors import CorruptRecordError
from rocks_timer.message import (KEYS, TAGS, UNIQ_KEY, Message, _normalise_keys,
                                 decode_properties)
from rocks_timer.record import BODY_LEN, FIXED_SIZE, HEADER, HEADER_SIZE, decode_record

try:
    from rocks_timer._native.codec import read_records as _native_read
except ImportError:  # pragma: no cover - no C compiler at install time
    _native_read = None

ROW = 9  # index row: entry, record at, size, body at, len, topic at, len, properties at, len
OUTSIDE, CORRUPT = "outside", "corrupt"


def read_records_py(entries: bytes, starts: list[int], fds: list[int], written: list[int]
                    ) -> tuple[bytes, bytes, list[tuple[int, str]]]:
    """(blob, index, problems) for packed ConsumeQueue ``entries``; the segments are given by
    their first offsets, file descriptors and bytes written (see ``consume.c``). An entry is
    outside the log or corrupt exactly when ``CommitLog.read`` + ``decode_record`` say so."""
    blob, rows, problems = bytearray(), array("q"), []
    for i, (offset, size, _tags) in enumerate(ENTRY.iter_unpack(entries)):
        s = bisect.bisect_right(starts, offset) - 1
        if s < 0 or offset >= starts[s] + written[s]:
            problems.append((i, OUTSIDE))
            continue
        inside = offset - starts[s]
        if size < FIXED_SIZE or inside + size > written[s]:
            problems.append((i, CORRUPT))
            continue
        data = os.pread(fds[s], size, inside)
        at = len(blob)
        blob += data + bytes(size - len(data))
        try:
            decode_record(data, offset)
        except CorruptRecordError:
            problems.append((i, CORRUPT))
            continue
        (body_len,) = BODY_LEN.unpack_from(data, HEADER_SIZE)
        topic_at = HEADER_SIZE + 4 + body_len + 1
        topic_len = data[topic_at - 1]
        rows.extend((i, at, size, at + HEADER_SIZE + 4, body_len, at + topic_at, topic_len,
                     at + topic_at + topic_len + 2, size - topic_at - topic_len - 2))
    return bytes(blob), rows.tobytes(), problems


read_records = _native_read if _native_read is not None else read_records_py


def message_from_fields(topic: str, body: bytes, flag: int, props: dict[str, str],
                        queue_id: int, queue_offset: int, commitlog_offset: int, born_ms: int,
                        store_ms: int, reconsume_times: int) -> Message:
    """``Message(...)`` of a decoded record without the constructor's checks (its fields come
    from a record that passed ``decode_record``'s): the same normalisation of TAGS, KEYS and
    UNIQ_KEY as ``Message.__post_init__``, on ``props`` (a fresh dict, taken over)."""
    tags = props.get(TAGS)
    keys = _normalise_keys(props.get(KEYS))
    msg_id = props.get(UNIQ_KEY)
    if keys:
        props[KEYS] = " ".join(keys)
    if msg_id:
        msg_id = msg_id.upper()
        props[UNIQ_KEY] = msg_id
    msg = object.__new__(Message)
    msg.__dict__.update(topic=topic, body=body, tags=tags or None, keys=keys, flag=flag,
                        properties=MappingProxyType(props), msg_id=msg_id or None,
                        queue_id=queue_id, queue_offset=queue_offset,
                        commitlog_offset=commitlog_offset, born_ms=born_ms, store_ms=store_ms,
                        reconsume_times=reconsume_times)
    return msg


class PulledBatch(Sequence):
    """A page of one queue's messages, held as the records read into one buffer.

    ``len(batch)``, ``batch.next_offset`` (the queue offset to read from next: past every entry
    looked at, including ones that could not be read), ``batch.bodies()`` (one ``bytes`` per
    message, nothing else built), ``batch.body(i)``, ``batch[i]`` (a :class:`PulledMessage`
    view), ``batch.messages()`` / ``batch.message(i)`` (``Message`` objects, as ``pull``)."""

    __slots__ = ("topic", "queue_id", "offset", "next_offset", "_blob", "_rows", "_n")

    def __init__(self, topic: str, queue_id: int, offset: int, next_offset: int,
                 blob: bytes = b"", index: bytes = b"") -> None:
        self.topic, self.queue_id, self.offset, self.next_offset = (topic, queue_id, offset,
                                                                    next_offset)
        self._blob = blob
        self._rows = memoryview(index).cast("q")
        self._n = len(self._rows) // ROW

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [PulledMessage(self, j * ROW) for j in range(*i.indices(self._n))]
        if not -self._n <= i < self._n:
            raise IndexError("PulledBatch index out of range")
        return PulledMessage(self, (i % self._n) * ROW)

    def __iter__(self):
        return (PulledMessage(self, k) for k in range(0, self._n * ROW, ROW))

    def __repr__(self) -> str:
        return (f"PulledBatch({self.topic!r}, queue {self.queue_id}, {self._n} messages, "
                f"offsets {self.offset}..{self.next_offset})")

    def bodies(self) -> list[bytes]:
        """Every message's body, in queue order (the cheapest way to consume a page)."""
        r, b = self._rows, self._blob
        return [b[r[k]:r[k] + r[k + 1]] for k in range(3, len(r), ROW)]

    def body(self, i: int) -> bytes:
        k = self._row(i)
        return self._blob[self._rows[k + 3]:self._rows[k + 3] + self._rows[k + 4]]

    def size(self, i: int) -> int:
        """The CommitLog record size of message ``i``."""
        return self._rows[self._row(i) + 2]

    def entry(self, i: int) -> int:
        """The ConsumeQueue offset of message ``i`` (its record's ``queue_offset``, unless the
        queue was rebuilt around damage)."""
        return self.offset + self._rows[self._row(i)]

    def messages(self) -> list[Message]:
        return [self.row_message(k) for k in range(0, self._n * ROW, ROW)]

    def records(self) -> tuple[bytes, memoryview]:
        """The buffer and its index, for a reader that copies whole records (the remoting
        front's pull): ``ROW`` int64 per message, namely entry number, record position in the
        buffer, record size, body position and length, topic position and length, properties
        position and length. Read-only: both are shared with this batch."""
        return self._blob, self._rows

    def message(self, i: int) -> Message:
        return self.row_message(self._row(i))

    # -- by row position (``k``: a message's first column; what ``PulledMessage`` reads) -----
    def row_body(self, k: int) -> bytes:
        r = self._rows
        return self._blob[r[k + 3]:r[k + 3] + r[k + 4]]

    def row_topic(self, k: int) -> str:
        r = self._rows
        return self._blob[r[k + 5]:r[k + 5] + r[k + 6]].decode("utf-8")

    def row_fields(self, k: int) -> tuple[int, int, int, int]:
        """queueId, flag, queueOffset, physicalOffset of the record at row ``k``."""
        return _FIELDS.unpack_from(self._blob, self._rows[k + 1] + 12)

    def row_times(self, k: int) -> tuple:
        """bornMs, bornHost, storeMs, storeHost, reconsumeTimes of the record at row ``k``."""
        return _TIMES.unpack_from(self._blob, self._rows[k + 1] + 40)

    def _row(self, i: int) -> int:
        if not -self._n <= i < self._n:
            raise IndexError("PulledBatch index out of range")
        return (i % self._n) * ROW

    def row_message(self, k: int) -> Message:
        r, b = self._rows, self._blob
        at, body_at, body_len, topic_at, props_at = r[k + 1], r[k + 3], r[k + 4], r[k + 5], r[k + 7]
        (_s, _m, _c, queue_id, flag, queue_offset, commitlog_offset, _sys, born_ms, _bh, store_ms,
         _sh, reconsume, _ptx) = HEADER.unpack_from(b, at)
        return message_from_fields(
            b[topic_at:topic_at + r[k + 6]].decode("utf-8"), b[body_at:body_at + body_len], flag,
            decode_properties(b[props_at:props_at + r[k + 8]]), queue_id, queue_offset,
            commitlog_offset, born_ms, store_ms, reconsume)


_FIELDS = struct.Struct(">iiqq")  # queueId, flag, queueOffset, physicalOffset at byte 12
_TIMES = struct.Struct(">q8sq8si")  # bornMs, bornHost, storeMs, storeHost, reconsumeTimes at 40


class PulledMessage:
    """One message of a :class:`PulledBatch`, read from its buffer when an attribute is asked
    for: ``body``, ``topic``, ``queue_id``, ``queue_offset``, ``commitlog_offset``, ``flag``,
    ``born_ms``, ``store_ms``, ``reconsume_times``; ``properties``, ``tags``, ``keys`` and
    ``msg_id`` decode the property string once. ``to_message()`` is the full ``Message``."""

    __slots__ = ("_batch", "_k", "_full")

    def __init__(self, batch: PulledBatch, k: int) -> None:
        self._batch, self._k, self._full = batch, k, None

    @property
    def body(self) -> bytes:
        return self._batch.row_body(self._k)

    @property
    def topic(self) -> str:
        return self._batch.row_topic(self._k)

    def _fields(self) -> tuple[int, int, int, int]:
        return self._batch.row_fields(self._k)

    def _times(self) -> tuple:
        return self._batch.row_times(self._k)

    queue_id = property(lambda self: self._fields()[0])
    flag = property(lambda self: self._fields()[1])
    queue_offset = property(lambda self: self._fields()[2])
    commitlog_offset = property(lambda self: self._fields()[3])
    born_ms = property(lambda self: self._times()[0])
    store_ms = property(lambda self: self._times()[2])
    reconsume_times = property(lambda self: self._times()[4])

    def _message(self) -> Message:
        if self._full is None:
            self._full = self._batch.row_message(self._k)
        return self._full

    properties = property(lambda self: self._message().properties)
    tags = property(lambda self: self._message().tags)
    keys = property(lambda self: self._message().keys)
    msg_id = property(lambda self: self._message().msg_id)

    def get_property(self, name: str, default: str | None = None) -> str | None:
        return self.properties.get(name, default)

    def to_message(self) -> Message:
        return self._message()

    def __repr__(self) -> str:
        return f"PulledMessage({self.topic!r}, queue_offset={self.queue_offset})"


def entry_at(entries: bytes, i: int) -> tuple[int, int]:
    """(CommitLog offset, size) of packed entry ``i``."""
    offset, size, _ = ENTRY.unpack_from(entries, i * ENTRY_SIZE)
    return offset, size


def cut_by_bytes(entries: bytes, max_bytes: int) -> bytes:
    """The entries whose record sizes add up to at most ``max_bytes`` (at least one)."""
    used = 0
    for i, (_offset, size, _tags) in enumerate(ENTRY.iter_unpack(entries)):
        used += max(size, 0)
        if i > 0 and used > max_bytes:
            return entries[:i * ENTRY_SIZE]
    return entries
