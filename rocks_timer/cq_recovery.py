"""Recovery of the ConsumeQueues from the CommitLog, run when a ``MessageStore`` opens.

Entries that point past the CommitLog's (possibly truncated) end are dropped, then the CommitLog
is walked once: a record whose queue offset a queue already holds costs a header read; a record
the queue lacks is decoded and indexed. A queue whose files were lost is rebuilt whole, and one
whose head expired with old segments restarts at its first surviving record. The walk also
restores each segment's newest store time, which retention needs.
"""
from __future__ import annotations

import logging
import struct

from rocks_timer.commitlog import CommitLog
from rocks_timer.consumequeue import ConsumeQueue, ConsumeQueueSet, tags_code
from rocks_timer.delay_levels import DelayLevelTable
from rocks_timer.errors import CorruptRecordError
from rocks_timer.record import HEADER_SIZE, decode_record

log = logging.getLogger(__name__)
_QUEUE_FIELDS = struct.Struct(">iiq")  # queueId, flag, queueOffset at byte 12
_STORE_MS = struct.Struct(">q")         # storeTimestamp at byte 56
_BODY_LEN = struct.Struct(">i")
_APPEND_EVERY = 4096


def rebuild_consume_queues(commitlog: CommitLog, queues: ConsumeQueueSet,
                           levels: DelayLevelTable) -> int:
    """Bring every queue level with the CommitLog; returns how many entries were added."""
    end = commitlog.max_offset
    for cq in queues.all():
        drop_entries_past(cq, end)
    pending: dict[tuple[str, int], tuple[int, list]] = {}
    segments = {s.start: s for s in commitlog.segments()}
    rebuilt = skipped = 0
    for raw in commitlog.iter_raw(commitlog.min_offset):
        data = raw.data
        queue_id, _flag, queue_offset = _QUEUE_FIELDS.unpack_from(data, 12)
        (store_ms,) = _STORE_MS.unpack_from(data, 56)
        segment = segments.get(raw.offset - raw.offset % commitlog.segment_size)
        if segment is not None:
            segment.last_store_ms = store_ms
        (body_len,) = _BODY_LEN.unpack_from(data, HEADER_SIZE)
        topic_at = HEADER_SIZE + 4 + body_len
        topic = data[topic_at + 1:topic_at + 1 + data[topic_at]].decode("utf-8", "replace")
        key = (topic, queue_id)
        cq = queues.get_or_create(topic, queue_id)
        first, entries = pending.setdefault(key, (cq.max_offset, []))
        expected = first + len(entries)
        if queue_offset < expected:
            continue  # already indexed
        if queue_offset > expected:
            if entries or cq.max_offset != cq.min_offset:
                log.error("recovery: %s/%d has a hole at queue offset %d (commitlog %d)",
                          topic, queue_id, expected, raw.offset)
                skipped += 1
                continue
            pending[key] = (queue_offset, entries)  # the queue's head expired: start there
        try:
            msg = decode_record(data, raw.offset)
        except CorruptRecordError as exc:
            log.error("recovery: skipping a corrupt record: %s", exc)
            skipped += 1
            continue
        entries.append((raw.offset, len(data), tags_code(topic, msg.properties, store_ms, levels)))
        rebuilt += 1
        if len(entries) >= _APPEND_EVERY:
            cq.append(entries, pending.pop(key)[0])
    for key, (first, entries) in pending.items():
        if entries:
            queues.get_or_create(*key).append(entries, first)
    if rebuilt or skipped:
        log.info("recovery: rebuilt %d consume queue entries, skipped %d", rebuilt, skipped)
    return rebuilt


def drop_entries_past(cq: ConsumeQueue, end: int) -> None:
    """Truncate ``cq`` at its first entry whose record starts at or past ``end``."""
    low, high = cq.min_offset, cq.max_offset
    while low < high:
        mid = (low + high) // 2
        entry = cq.get(mid)
        if entry is None or entry.commitlog_offset >= end:
            high = mid
        else:
            low = mid + 1
    cq.truncate(low)
