"""CommitLog loss: bytes of the CommitLog that are gone while something acknowledged points into
them, and the messages those pointers name (docs/ARCHITECTURE.md §7, issue #30).

A torn tail (an incomplete last record that nothing points into) is not loss: it was never
acknowledged and is cut. Everything else that is gone is loss and is named:

- a segment missing between others, or a sealed segment shorter than a segment
  (``CommitLog.lost_ranges``);
- ConsumeQueue entries that point at or past the CommitLog's end (the newest segment was cut
  or deleted below records that had been written and indexed);
- the timer engine's reconcile checkpoint beyond the end (it had delivered copies there).

What is found is written to ``<data>/config/commitlogLoss.json`` (crash-safely, before recovery
drops the entries that named it), so the loss stays listed by ``stats``, ``check`` and
``rtimer lost`` on every later open until an operator accepts it (``rtimer lost accept``);
accepting keeps the record and only stops ``check`` failing on it.

A lost message is named by what survives: its topic, queue and queue offset, its CommitLog
offset and size (from its ConsumeQueue entry), and its msg_id when another record still says it
(the timer engine's delivered copies do not survive with the range, so mostly it is unknown).
"""
from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from rocks_timer.commitlog import LostRange
from rocks_timer.consumequeue import ENTRY, ConsumeQueue
from rocks_timer.errors import CorruptRecordError
from rocks_timer.fileio import replace_durably
from rocks_timer.private import private_dir
from rocks_timer.record import FIXED_SIZE

log = logging.getLogger(__name__)
FILE_NAME = "commitlogLoss.json"
_CHUNK = 4096
MAX_NAMED = 100_000  # messages kept by name in the record; beyond that they are counted


@dataclass(frozen=True, slots=True)
class LostMessage:
    """A message whose CommitLog record is gone, as its ConsumeQueue entry named it."""

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    size: int
    msg_id: str | None = None

    def describe(self) -> str:
        who = f"msg_id {self.msg_id}, " if self.msg_id else ""
        return (f"lost message {who}topic {self.topic} queue {self.queue_id} offset "
                f"{self.queue_offset} (commitlog offset {self.commitlog_offset}, "
                f"{self.size} bytes)")


def lost_entries(queue: ConsumeQueue, ranges: Iterable[LostRange], end: int
                 ) -> list[LostMessage]:
    """Entries of ``queue`` whose record overlaps one of ``ranges`` or runs past ``end`` (a
    record that had been written and indexed). A queue's entries ascend in CommitLog offset, so each
    range is found by bisection; the tail past ``end`` is walked backwards from the last entry,
    as recovery drops it (zeros or junk there are not messages and are not named)."""
    found: dict[int, LostMessage] = {}
    low_bound = queue.min_offset
    for lost in ranges:
        # the entry before the first one starting in the range may run into it
        at = max(queue.min_offset, _first_at_or_after(queue, lost.start) - 1)
        while at < queue.max_offset:
            data = queue.raw_entries(at, min(_CHUNK, queue.max_offset - at))
            stop = False
            for i, (offset, size, _) in enumerate(ENTRY.iter_unpack(data)):
                if offset >= lost.end:
                    stop = True
                    break
                if offset + size > lost.start and size >= FIXED_SIZE:
                    found[at + i] = _message(queue, at + i, offset, size)
            if stop:
                break
            at += len(data) // ENTRY.size
    high, chunk = queue.max_offset, 16  # usually the last entry settles it: read little first
    while high > low_bound:
        low = max(low_bound, high - chunk)
        chunk = min(_CHUNK, chunk * 4)
        data = queue.raw_entries(low, high - low)
        for i in range(high - low - 1, -1, -1):
            offset, size, _ = ENTRY.unpack_from(data, i * ENTRY.size)
            if size < FIXED_SIZE:
                continue  # zeros, a placeholder or junk: nothing to name
            if offset + size <= end:
                return [found[k] for k in sorted(found)]
            found[low + i] = _message(queue, low + i, offset, size)
        high = low
    return [found[k] for k in sorted(found)]


def find_loss(commitlog: Any, queues: Iterable[ConsumeQueue]
              ) -> tuple[list[LostRange], list[LostMessage]]:
    """What is lost in ``commitlog`` as ``queues`` show it: the CommitLog's lost ranges, plus
    the range cut off its end below records the queues index; and the messages named."""
    ranges = list(commitlog.lost_ranges)
    end = commitlog.max_offset  # the last whole record's end: a torn tail is past it
    found = [m for cq in queues for m in lost_entries(cq, ranges, end)]
    past = [m.commitlog_offset + m.size for m in found if m.commitlog_offset + m.size > end
            and not any(r.start <= m.commitlog_offset < r.end for r in ranges)]
    if past:  # not a torn tail: records that had been written and indexed are gone
        ranges.append(LostRange(end, max(past), "-", "the commitlog ends below records its "
                                "consume queues index (its newest segment was cut or deleted)"))
    return ranges, found


def _message(queue: ConsumeQueue, queue_offset: int, offset: int, size: int) -> LostMessage:
    return LostMessage(queue.topic, queue.queue_id, queue_offset, offset, size)


def _first_at_or_after(queue: ConsumeQueue, commitlog_offset: int) -> int:
    low, high = queue.min_offset, queue.max_offset
    while low < high:
        mid = (low + high) // 2
        if ENTRY.unpack(queue.raw_entries(mid, 1))[0] >= commitlog_offset:
            high = mid
        else:
            low = mid + 1
    return low


@dataclass
class LossRecord:
    """What ``commitlogLoss.json`` holds: every lost range and message found so far."""

    ranges: list[LostRange]
    messages: list[LostMessage]
    more_messages: int = 0   # named beyond MAX_NAMED: counted only
    accepted: int = 0        # how many of the messages (in order) an operator accepted
    accepted_ranges: int = 0  # likewise for the ranges

    @property
    def total(self) -> int:
        return len(self.messages) + self.more_messages

    @property
    def unaccepted(self) -> int:
        return self.total - self.accepted

    @property
    def unaccepted_ranges(self) -> int:
        return len(self.ranges) - self.accepted_ranges

    def as_dict(self, limit: int | None = None) -> dict[str, Any]:
        listed = self.messages if limit is None else self.messages[:limit]
        return {"ranges": [asdict(r) for r in self.ranges],
                "messages": [asdict(m) for m in listed],
                "lost_messages": self.total, "accepted": self.accepted,
                "unaccepted": self.unaccepted, "unaccepted_ranges": self.unaccepted_ranges}


class LossLedger:
    """Owns ``<data>/config/commitlogLoss.json``. A writer (``MessageStore``) adds what an open
    found; a reader (``ReadOnlyView``) only loads. A damaged file is a clear error, never a
    silent reset (it is evidence)."""

    def __init__(self, data_dir: Path | str):
        self.path = Path(data_dir) / "config" / FILE_NAME
        self._lock = threading.Lock()

    def load(self) -> LossRecord:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return LossRecord([], [])
        try:
            doc = json.loads(raw.decode("utf-8"))
            return LossRecord([LostRange(**r) for r in doc["ranges"]],
                              [LostMessage(**m) for m in doc["messages"]],
                              int(doc.get("more_messages", 0)), int(doc.get("accepted", 0)),
                              int(doc.get("accepted_ranges", 0)))
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptRecordError(f"commitlog loss record {self.path} is damaged ({exc}); "
                                     "it lists messages lost earlier: restore it from a copy",
                                     where=str(self.path), raw=raw[:64]) from None

    def add(self, ranges: Iterable[LostRange], messages: Iterable[LostMessage]) -> LossRecord:
        """Add what was found (ranges and messages already recorded are not repeated)."""
        with self._lock:
            record = self.load()
            known_ranges = {(r.start, r.end) for r in record.ranges}
            new_ranges = [r for r in ranges if (r.start, r.end) not in known_ranges]
            known = {(m.topic, m.queue_id, m.queue_offset, m.commitlog_offset)
                     for m in record.messages}
            new = [m for m in messages
                   if (m.topic, m.queue_id, m.queue_offset, m.commitlog_offset) not in known]
            if not new_ranges and not new:
                return record
            record.ranges += new_ranges
            room = max(0, MAX_NAMED - len(record.messages))
            record.messages += new[:room]
            record.more_messages += len(new) - len(new[:room])
            for r in new_ranges:
                log.error("%s", r.describe())
            for m in new[:20]:
                log.error("%s", m.describe())
            if len(new) > 20:
                log.error("... and %d more lost messages (rtimer lost list)", len(new) - 20)
            self._write(record)
            return record

    def accept(self) -> LossRecord:
        """An operator has seen every loss recorded so far: ``check`` stops failing on them
        (they stay listed)."""
        with self._lock:
            record = self.load()
            if record.unaccepted or record.unaccepted_ranges:
                record.accepted, record.accepted_ranges = record.total, len(record.ranges)
                self._write(record)
            return record

    def _write(self, record: LossRecord) -> None:
        private_dir(self.path.parent)
        doc = {"version": 1, "ranges": [asdict(r) for r in record.ranges],
               "messages": [asdict(m) for m in record.messages],
               "more_messages": record.more_messages, "accepted": record.accepted,
               "accepted_ranges": record.accepted_ranges}
        replace_durably(self.path, json.dumps(doc, indent=1).encode("utf-8"))
