"""Recovery of the ConsumeQueues from the CommitLog, run when a ``MessageStore`` opens.

Entries that point past the CommitLog's (possibly truncated) end are dropped, then the CommitLog
is walked once. For a record whose queue offset a queue already holds, the entry there is
compared with the record (CommitLog offset and size, read in chunks, so the common case costs a
header parse and a 12-byte compare); an entry that does not match, or that lies in a missing or
short file, is rewritten from the record. A record the queue lacks is decoded and appended. A
queue whose files were lost is rebuilt whole, and one whose head expired with old segments
restarts at its first surviving record. A record that fails its CRC is counted and skipped; if
it leaves a hole in its queue's offsets, the hole gets a placeholder entry (size 0) that
``pull`` reports and steps over, so the records after it stay reachable. The walk also restores
each segment's newest store time, which retention needs.
"""
from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field

from rocks_timer.commitlog import CommitLog
from rocks_timer.consumequeue import ENTRY, ENTRY_SIZE, ConsumeQueue, ConsumeQueueSet, tags_code
from rocks_timer.delay_levels import DelayLevelTable
from rocks_timer.errors import CorruptRecordError
from rocks_timer.record import FIXED_SIZE, HEADER_SIZE, decode_record

log = logging.getLogger(__name__)
_QUEUE_FIELDS = struct.Struct(">iiq")  # queueId, flag, queueOffset at byte 12
_STORE_MS = struct.Struct(">q")         # storeTimestamp at byte 56
_BODY_LEN = struct.Struct(">i")
_POINTER = struct.Struct(">qi")          # the first 12 bytes of an entry
_APPEND_EVERY = 4096
_CHUNK = 4096


@dataclass
class RecoveryReport:
    """What one recovery walk did (``MessageStore.recovery``)."""

    rebuilt_entries: int = 0    # appended to a queue that lagged
    repaired_entries: int = 0   # rewritten: missing, short or mismatched
    placeholder_entries: int = 0  # holes left by corrupt records
    corrupt_records: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"rebuilt_entries": self.rebuilt_entries,
                "repaired_entries": self.repaired_entries,
                "placeholder_entries": self.placeholder_entries,
                "corrupt_records": self.corrupt_records, "problems": list(self.problems)}


class _QueueWalk:
    """One queue during the walk: its entries read in chunks, appends batched."""

    def __init__(self, cq: ConsumeQueue):
        self.cq = cq
        self.first = cq.max_offset  # where the pending appends start
        self.pending: list[tuple[int, int, int]] = []
        self._base = -1
        self._chunk = b""

    @property
    def end(self) -> int:
        return self.first + len(self.pending)

    @property
    def empty(self) -> bool:
        return not self.pending and self.cq.max_offset == self.cq.min_offset

    def matches(self, queue_offset: int, offset: int, size: int) -> bool:
        if not self._base <= queue_offset < self._base + len(self._chunk) // ENTRY_SIZE:
            self._base = queue_offset
            count = min(_CHUNK, self.cq.max_offset - queue_offset)
            self._chunk = self.cq.raw_entries(queue_offset, count)
        at = (queue_offset - self._base) * ENTRY_SIZE
        return self._chunk[at:at + 12] == _POINTER.pack(offset, size)

    def forget(self) -> None:
        """Drop the cached chunk (an entry in it was rewritten)."""
        self._base, self._chunk = -1, b""

    def append(self, entry: tuple[int, int, int]) -> None:
        self.pending.append(entry)
        if len(self.pending) >= _APPEND_EVERY:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.cq.append(self.pending, self.first)
            self.first += len(self.pending)
            self.pending = []


def rebuild_consume_queues(commitlog: CommitLog, queues: ConsumeQueueSet,
                           levels: DelayLevelTable) -> RecoveryReport:
    """Bring every queue level with, and true to, the CommitLog."""
    report = RecoveryReport()
    end = commitlog.max_offset
    for cq in queues.all():
        drop_entries_past(cq, end)
        report.problems.extend(f"consume queue {cq.topic}/{cq.queue_id}: file {p}"
                               for p in cq.damaged_files)
    walks: dict[tuple[str, int], _QueueWalk] = {}
    segments = {s.start: s for s in commitlog.segments()}
    for raw in commitlog.iter_raw(commitlog.min_offset):
        data = raw.data
        queue_id, _flag, queue_offset = _QUEUE_FIELDS.unpack_from(data, 12)
        (store_ms,) = _STORE_MS.unpack_from(data, 56)
        segment = segments.get(raw.offset - raw.offset % commitlog.segment_size)
        if segment is not None:
            segment.last_store_ms = store_ms
        topic = _topic_of(data)
        walk = walks.get((topic, queue_id)) if topic is not None else None
        if walk is None and topic is not None:
            cq = queues.get(topic, queue_id)
            if cq is not None:
                walk = walks[(topic, queue_id)] = _QueueWalk(cq)
        if walk is not None and walk.cq.min_offset <= queue_offset < walk.cq.max_offset \
                and walk.matches(queue_offset, raw.offset, len(data)):
            continue  # already indexed: the common case
        try:
            msg = decode_record(data, raw.offset)
        except CorruptRecordError as exc:
            report.corrupt_records += 1
            log.error("recovery: skipping a corrupt record: %s", exc)
            if walk is not None and queue_offset == walk.end and not walk.empty:
                walk.append((raw.offset, len(data), 0))  # pull reports it and steps over
                report.placeholder_entries += 1
            continue
        topic, key = msg.topic, (msg.topic, queue_id)
        if walk is None:
            walk = walks[key] = _QueueWalk(queues.get_or_create(topic, queue_id))
        entry = (raw.offset, len(data), tags_code(topic, msg.properties, store_ms, levels))
        if queue_offset < walk.cq.max_offset:
            walk.cq.put_at(queue_offset, entry)
            walk.forget()
            report.repaired_entries += 1
            continue
        if queue_offset < walk.end:
            continue  # appended earlier in this walk (a record replayed twice cannot be)
        if queue_offset > walk.end:
            if walk.empty:
                walk.flush()
                walk.first = queue_offset  # the queue's head expired: start there
            else:
                gap = queue_offset - walk.end
                report.placeholder_entries += gap
                report.problems.append(f"consume queue {topic}/{queue_id}: {gap} entries from "
                                       f"queue offset {walk.end} have no readable record")
                for _ in range(gap):
                    walk.append((raw.offset, 0, 0))
        walk.append(entry)
        report.rebuilt_entries += 1
    for walk in walks.values():
        walk.flush()
    if report.rebuilt_entries or report.repaired_entries or report.corrupt_records:
        log.info("recovery: rebuilt %d consume queue entries, repaired %d, %d corrupt records",
                 report.rebuilt_entries, report.repaired_entries, report.corrupt_records)
    return report


def _topic_of(data: bytes) -> str | None:
    (body_len,) = _BODY_LEN.unpack_from(data, HEADER_SIZE)
    topic_at = HEADER_SIZE + 4 + body_len
    if body_len < 0 or topic_at >= len(data):
        return None
    try:
        return data[topic_at + 1:topic_at + 1 + data[topic_at]].decode("utf-8")
    except UnicodeError:
        return None


def drop_entries_past(cq: ConsumeQueue, end: int) -> None:
    """Truncate ``cq`` after its last entry that points at a record before ``end``. Only a tail of
    entries can point past a cut CommitLog, so the walk goes backwards from the end, a chunk at
    a time; a corrupt entry in the middle that points past the end is repaired by the walk, not
    taken for the tail. An entry in a missing file reads as offset 0: kept, and repaired."""
    high = cq.max_offset
    while high > cq.min_offset:
        low = max(cq.min_offset, high - _CHUNK)
        data = cq.raw_entries(low, high - low)
        for i in range(high - low - 1, -1, -1):
            offset, size, _ = ENTRY.unpack_from(data, i * ENTRY_SIZE)
            if offset < end and size >= FIXED_SIZE:  # zeros or junk at the tail go too
                cq.truncate(low + i + 1)
                return
        high = low
    cq.truncate(cq.min_offset)
