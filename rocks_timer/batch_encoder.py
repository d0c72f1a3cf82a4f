"""The CommitLog's hot path: ``prepare_batch`` (the producer's share: property strings and
sizes) and ``encode_batch`` (the writer's: a run of messages encoded as consecutive records, with
the queue offsets they take and the ConsumeQueue entries that index them).

Each is the optional C encoder (``rocks_timer/_native/commitlog.c``, built by
``setup.py``) when it was built, else the ``*_py`` reference implementation here; the
two give the same results (tests/log/test_batch_encoder.py). The C version reads the messages
under the GIL and copies bytes and computes CRCs with the GIL released, so producers keep
running while the writer encodes a group.
"""
from __future__ import annotations

import struct
from typing import Callable, NamedTuple

from rocks_timer.consumequeue import ENTRY, tags_hash
from rocks_timer.message import SCHEDULE_TOPIC, Message
from rocks_timer.record import (PREPARED_TRAILER_SIZE, encode_record_into, finish_prepared_into,
                                message_record_size, prepared_fields)

try:
    from rocks_timer._native import codec as native
except ImportError:  # pragma: no cover - no C compiler at install time
    native = None

META = struct.Struct("=qqii")  # per message: queue offset, CommitLog offset, size, queue id

QueueKey = tuple[str, int]


class QueueRun(NamedTuple):
    """The part of a batch that went to one (topic, queue)."""

    key: QueueKey
    first_queue_offset: int
    entries: bytes  # packed ConsumeQueue entries, in queue order
    record_bytes: int


class Batch(NamedTuple):
    count: int          # messages encoded (a batch stops where the segment ends)
    data: bytes         # the records, back to back
    meta: bytes         # META per message
    queues: list[QueueRun]


def prepare_batch_py(messages: list[Message | bytes], max_body: int, max_properties: int
                     ) -> tuple[int, bool]:
    """The producer's share, before a batch is queued: cache every property string and sum the
    bodies. Returns (body bytes, clean); not clean when a message is over a limit or has no id,
    which the caller handles message by message."""
    body_bytes, clean = 0, True
    for msg in messages:
        if type(msg) is bytes:  # a prepared record (record.prepare_record): checked already
            body_bytes += len(msg)
            continue
        body = len(msg.body)
        body_bytes += body
        if body > max_body or len(msg.encoded_properties) > max_properties or not msg.msg_id:
            clean = False
    return body_bytes, clean


def record_size_of(item: Message | bytes) -> int:
    """The CommitLog bytes of a batch item: a message, or a prepared record."""
    return len(item) - PREPARED_TRAILER_SIZE if type(item) is bytes else message_record_size(item)


def encode_batch_py(messages: list[Message | bytes], first: int, start: int, limit: int, store_ms: int,
                    assigned: dict[QueueKey, int], lookup: Callable[[QueueKey], int],
                    schedule_tags: Callable[[Message], int]) -> Batch:
    """Encode ``messages[first:]`` from CommitLog offset ``start``, stopping before the first
    record that would end past ``limit``.

    Queue offsets continue from ``assigned`` (the group's next offset per queue, updated only on
    success), else from ``lookup(key)``. The tags code is ``schedule_tags(msg)`` for
    SCHEDULE_TOPIC_XXXX, else Java's hash of TAGS (0 without).
    """
    buf, meta = bytearray(), bytearray()
    runs: dict[QueueKey, list] = {}  # key -> [first offset, next offset, entries, bytes]
    position, i = start, first
    for msg in messages[first:]:
        prepared = type(msg) is bytes
        if prepared:
            size, topic, queue_id, tags = prepared_fields(msg)
            key = (topic, queue_id)
        else:
            size = message_record_size(msg)
            key = (msg.topic, msg.queue_id or 0)
        if position + size > limit:
            break
        run = runs.get(key)
        if run is None:
            offset = assigned.get(key)
            offset = lookup(key) if offset is None else offset
            run = runs[key] = [offset, offset, bytearray(), 0]
        if prepared:
            finish_prepared_into(buf, msg, queue_offset=run[1], physical_offset=position,
                                 store_ms=store_ms)
        else:
            encode_record_into(buf, msg, msg.encoded_properties, queue_id=key[1],
                               queue_offset=run[1], physical_offset=position, store_ms=store_ms,
                               born_ms=store_ms if msg.born_ms is None else msg.born_ms)
            tags = (schedule_tags(msg) if msg.topic == SCHEDULE_TOPIC
                    else tags_hash(msg.tags) if msg.tags else 0)
        run[2] += ENTRY.pack(position, size, tags)
        meta += META.pack(run[1], position, size, key[1])
        run[1] += 1
        run[3] += size
        position += size
        i += 1
    for key, run in runs.items():
        assigned[key] = run[1]
    queues = [QueueRun(key, run[0], bytes(run[2]), run[3]) for key, run in runs.items()]
    return Batch(i - first, bytes(buf), bytes(meta), queues)


_new = tuple.__new__  # a NamedTuple from a tuple of its fields, without its Python __new__


def encode_batch_native(messages, first, start, limit, store_ms, assigned, lookup,
                         schedule_tags) -> Batch:
    count, data, meta, queues = native.encode_batch(messages, first, start, limit, store_ms,
                                                    assigned, lookup, schedule_tags)
    return _new(Batch, (count, data, meta, [_new(QueueRun, q) for q in queues]))


if native is None:  # pragma: no cover - no C compiler at install time
    prepare_batch, encode_batch = prepare_batch_py, encode_batch_py
else:
    prepare_batch, encode_batch = native.prepare_batch, encode_batch_native
