"""``Broker.check()``: a read-only walk of the broker's invariants, with a report.

What it checks (each violation is one line in ``problems``):

- every CommitLog record passes its CRC (a damaged region is named), and no sealed segment is
  short;
- every record below the CommitLog end is indexed by its queue at its queue offset, and every
  ConsumeQueue entry (from the first that points at a live segment) points at a matching record
  (same CommitLog offset and size); placeholders left for corrupt records count as violations;
- the timer engine's own invariants (RocksDB: pending counter = keys, no key below the cursor,
  values decode, value segments' live counts and bytes = what the index points at; wheel: no
  corrupt TimerLog unit);
- offsets are in range: consumer group offsets, delay-level offsets and the wheel's queue offset
  are at most their queue's end, the RocksDB reconcile offset at most the CommitLog end.

It changes nothing. It is O(stored data): a diagnostic (``rtimer check``) and the last line of
tests, not something to run on a hot path. The CommitLog end and the queues' ends are taken
under the writer's lock, so a broker running meanwhile does not cause false reports.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from rocks_timer.consumequeue import ENTRY, ENTRY_SIZE, ConsumeQueue
from rocks_timer.errors import RocksTimerError
from rocks_timer.message import SCHEDULE_TOPIC, WHEEL_TIMER_TOPIC
from rocks_timer.record import HEADER_SIZE

_QUEUE_FIELDS = struct.Struct(">iiq")  # queueId, flag, queueOffset at byte 12
_BODY_LEN = struct.Struct(">i")
_POINTER = struct.Struct(">qi")
_CHUNK = 4096
MAX_LISTED = 50  # problems listed one by one; the rest are counted


@dataclass
class CheckReport:
    """What ``Broker.check()`` found: ``ok`` when ``problems`` is empty."""

    problems: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    more_problems: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, problem: str) -> None:
        if len(self.problems) < MAX_LISTED:
            self.problems.append(problem)
        else:
            self.more_problems += 1

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": list(self.problems),
                "more_problems": self.more_problems, **self.figures}

    def __getitem__(self, key: str) -> Any:  # report["problems"], as the engines' checks read
        return self.as_dict()[key]


class _Entries:
    """A queue's entries read in chunks, for comparing with records in log order."""

    def __init__(self, cq: ConsumeQueue, end: int):
        self.cq, self.end = cq, end
        self.matched = 0
        self._base, self._chunk = -1, b""

    def matches(self, queue_offset: int, offset: int, size: int) -> bool:
        if not self.cq.min_offset <= queue_offset < self.end:
            return False
        if not self._base <= queue_offset < self._base + len(self._chunk) // ENTRY_SIZE:
            self._base = queue_offset
            self._chunk = self.cq.raw_entries(queue_offset, min(_CHUNK, self.end - queue_offset))
        at = (queue_offset - self._base) * ENTRY_SIZE
        return self._chunk[at:at + 12] == _POINTER.pack(offset, size)

    def first_live(self, commitlog_min: int) -> int:
        """The first queue offset whose entry points at or past ``commitlog_min``."""
        low, high = self.cq.min_offset, self.end
        while low < high:
            mid = (low + high) // 2
            if ENTRY.unpack(self.cq.raw_entries(mid, 1))[0] >= commitlog_min:
                high = mid
            else:
                low = mid + 1
        return low


def check_broker(broker) -> CheckReport:
    report = CheckReport()
    store = broker.messages
    commitlog = store.commitlog
    with store._write_lock:  # a consistent cut: no group is half written
        until = commitlog.max_offset
        queues = {(q.topic, q.queue_id): _Entries(q, q.max_offset) for q in store.queues.all()}
    _check_log_and_queues(report, commitlog, queues, until)
    _check_timer(report, broker)
    _check_offsets(report, broker, {k: w.end for k, w in queues.items()}, until)
    report.figures.update(commitlog_min_offset=commitlog.min_offset, commitlog_max_offset=until,
                          queues=len(queues))
    return report


def _check_log_and_queues(report: CheckReport, commitlog, queues: dict, until: int) -> None:
    records = unindexed = 0
    for raw in commitlog.iter_verified(until):
        records += 1
        data = raw.data
        queue_id, _flag, queue_offset = _QUEUE_FIELDS.unpack_from(data, 12)
        (body_len,) = _BODY_LEN.unpack_from(data, HEADER_SIZE)
        at = HEADER_SIZE + 4 + body_len
        topic = data[at + 1:at + 1 + data[at]].decode("utf-8", "replace")
        walk = queues.get((topic, queue_id))
        if walk is not None and walk.matches(queue_offset, raw.offset, len(data)):
            walk.matched += 1
            continue
        unindexed += 1
        report.add(f"commitlog record at {raw.offset} ({topic}/{queue_id} queue offset "
                   f"{queue_offset}) has no matching consume queue entry")
    for damage in commitlog.damage:
        report.add(damage.describe())
    for name in commitlog.missing_segments:
        report.add(f"commitlog segment {name} is missing: the records it held are lost")
    for name in commitlog.short_segments:
        report.add(f"commitlog segment {name} is shorter than a sealed segment "
                   f"({commitlog.segment_size} bytes): the records past its end are lost")
    entries = 0
    floor = commitlog.min_offset
    for (topic, queue_id), walk in sorted(queues.items()):
        live = walk.end - walk.first_live(floor)
        entries += live
        if live != walk.matched:
            report.add(f"consume queue {topic}/{queue_id}: {live - walk.matched} of {live} "
                       "entries point at no matching commitlog record")
        for problem in walk.cq.file_problems():
            report.add(f"consume queue {topic}/{queue_id}: file {problem}")
    report.figures.update(commitlog_records=records, consume_queue_entries=entries,
                          unindexed_records=unindexed,
                          commitlog_corrupt_regions=len(commitlog.damage))


def _check_timer(report: CheckReport, broker) -> None:
    timer = broker.timer
    engine_check = getattr(timer, "check", None)
    if engine_check is None:
        report.figures["timer"] = {"engine": timer.name, "pending": timer.pending_count()}
        return
    try:
        result = engine_check()
    except RocksTimerError as exc:  # a corrupt SST, for instance: the report says so
        report.add(f"timer engine {timer.name}: {exc}")
        report.figures["timer"] = {"engine": timer.name, "pending": timer.pending_count()}
        return
    for problem in result.get("problems", []):
        report.add(f"timer engine {timer.name}: {problem}")
    report.figures["timer"] = {k: v for k, v in result.items() if k != "problems"}


def _check_offsets(report: CheckReport, broker, ends: dict[tuple[str, int], int],
                   until: int) -> None:
    try:
        table = broker.consumer_offsets.table()
    except RocksTimerError as exc:
        report.add(str(exc))
        table = {}
    for (topic, group, queue_id), offset in sorted(table.items()):
        end = ends.get((topic, queue_id), 0)
        if offset > end:
            report.add(f"consumer group {group} on {topic}/{queue_id}: offset {offset} is "
                       f"beyond the queue's end {end}")
    levels = broker.levels
    if levels is not None:
        for level, offset in sorted(levels.offsets.snapshot().items()):
            end = ends.get((SCHEDULE_TOPIC, level - 1), 0)
            if offset > end:
                report.add(f"delay level {level}: offset {offset} is beyond its queue's end {end}")
    timer = broker.timer
    reconciled = timer.reconcile_from()
    if reconciled is not None and reconciled > until:
        report.add(f"timer engine {timer.name}: reconciled up to commitlog offset {reconciled}, "
                   f"beyond the commitlog end {until}")
    state = getattr(timer, "state", None)
    if state is not None and hasattr(state, "queue_offset"):
        end = ends.get((WHEEL_TIMER_TOPIC, 0), 0)
        if state.queue_offset > end:
            report.add(f"wheel: enqueue offset {state.queue_offset} is beyond the timer topic's "
                       f"end {end}")
