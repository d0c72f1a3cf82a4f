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

- nothing acknowledged is missing: CommitLog ranges lost under ConsumeQueue entries or the
  timer's reconcile checkpoint (``commitlog_loss``; the messages named by topic, queue and
  offset) fail the check until an operator accepts them (``rtimer lost accept``), and set-aside
  messages fail it while any exist (named by msg_id, topic, keys and due time).

It changes nothing, and walks either a live broker's parts (``Broker.check``, the CommitLog end
and queues' ends taken between group writes, so a broker running meanwhile does not cause false
reports) or a ``ReadOnlyView`` of a data dir no broker holds (``rtimer check``): both expose the
same small surface (``LiveSource`` here, ``ReadOnlyView`` there). It is O(stored data): a
diagnostic and the last line of tests, not something to run on a hot path.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from rocks_timer.commitlog_loss import LossRecord
from rocks_timer.consumequeue import ENTRY, ENTRY_SIZE, ConsumeQueue
from rocks_timer.errors import RocksTimerError
from rocks_timer.message import SCHEDULE_TOPIC, WHEEL_TIMER_TOPIC
from rocks_timer.record import FIXED_SIZE, HEADER_SIZE, decode_record

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


class LiveSource:
    """What ``check_view`` walks, taken from an open Broker through its public parts."""

    def __init__(self, broker):
        self.broker = broker
        self.commitlog = broker.messages.commitlog
        self.timer_name = broker.timer.name
        self.problems: list[str] = []
        self.notes: list[str] = []

    def ends(self) -> tuple[int, dict[tuple[str, int], int]]:
        return self.broker.messages.consistent_ends()

    def queues(self) -> list[ConsumeQueue]:
        return self.broker.messages.queues.all()

    def timer_check(self) -> dict[str, Any]:
        return self.broker.timer.check()

    def consumer_offsets(self) -> dict[tuple[str, str, int], int]:
        return self.broker.consumer_offsets.table()

    def level_offsets(self) -> dict[int, int]:
        levels = self.broker.levels
        return levels.offsets.snapshot() if levels is not None else {}

    def reconcile_from(self) -> int | None:
        return self.broker.timer.reconcile_from()

    def wheel_queue_offset(self) -> int | None:
        return self.broker.timer.enqueue_offset()

    def loss(self) -> LossRecord:
        return self.broker.messages.loss.load()

    def set_aside(self) -> list[Any]:
        return self.broker.timer.set_aside()


def check_broker(broker) -> CheckReport:
    return check_view(LiveSource(broker))


def check_data_dir(path, config=None) -> CheckReport:
    """``check_view`` on a ``ReadOnlyView`` of a data dir no broker holds: nothing is opened
    for writing, nothing changes (StoreLockedError while a broker runs: ask it instead)."""
    from rocks_timer.readonly import ReadOnlyView
    with ReadOnlyView(path, config) as view:
        return check_view(view)


def check_view(source) -> CheckReport:
    """Walk ``source`` (a ``LiveSource`` or a ``ReadOnlyView``) and report."""
    report = CheckReport()
    commitlog = source.commitlog
    until, ends = source.ends()
    queues = {(q.topic, q.queue_id): _Entries(q, ends.get((q.topic, q.queue_id), q.max_offset))
              for q in source.queues()}
    for problem in source.problems:
        report.add(problem)
    try:
        loss = source.loss()
    except RocksTimerError as exc:
        report.add(str(exc))
        loss = LossRecord([], [])
    known_lost: dict[tuple[str, int], list[int]] = {}
    for m in loss.messages:
        known_lost.setdefault((m.topic, m.queue_id), []).append(m.queue_offset)
    _check_log_and_queues(report, commitlog, queues, until, known_lost)
    _check_timer(report, source)
    _check_offsets(report, source, {k: w.end for k, w in queues.items()}, until)
    _check_loss(report, source, loss)
    _check_set_aside(report, source)
    report.figures.update(commitlog_min_offset=commitlog.min_offset, commitlog_max_offset=until,
                          queues=len(queues))
    if commitlog.torn_tail is not None:
        offset, length = commitlog.torn_tail
        report.figures["torn_tail"] = {"offset": offset, "bytes": length}
        source.notes.append(f"commitlog: a torn tail of {length} bytes at offset {offset} "
                            "(an incomplete last record nothing points into) will be cut by "
                            "the next open")
    if source.notes:
        report.figures["notes"] = list(source.notes)
    return report


def _check_loss(report: CheckReport, source, record: LossRecord) -> None:
    report.figures["lost_messages"] = record.total
    report.figures["lost_ranges"] = len(record.ranges)
    if not record.unaccepted and not record.unaccepted_ranges:
        if record.total or record.ranges:
            source.notes.append(f"{record.total} lost message(s) recorded earlier were "
                                "accepted by an operator (rtimer lost list)")
        return
    for lost in record.ranges[record.accepted_ranges:]:
        report.add(lost.describe())
    fresh = record.messages[record.accepted:]
    for message in fresh[:MAX_LISTED // 2]:
        report.add(message.describe())
    if record.unaccepted:
        report.add(f"{record.unaccepted} acknowledged message(s) lost with the commitlog "
                   "range(s) above: `rtimer lost list` names them all; `rtimer lost accept` "
                   "records that you have seen them")


def _check_set_aside(report: CheckReport, source) -> None:
    try:
        rows = source.set_aside()
    except RocksTimerError as exc:
        report.add(f"set-aside messages cannot be listed: {exc}")
        return
    report.figures["set_aside"] = len(rows)
    if not rows:
        return
    for row in rows[:MAX_LISTED // 2]:
        report.add(row.info.describe())
    restorable = sum(1 for row in rows if row.info.restorable)
    report.add(f"{len(rows)} message(s) set aside, not delivered ({restorable} restorable "
               "now): `rtimer set-aside list` shows them, `rtimer set-aside export DIR` saves "
               "what is readable, `rtimer set-aside restore` puts back what decodes")


def _check_log_and_queues(report: CheckReport, commitlog, queues: dict, until: int,
                          known_lost: dict[tuple[str, int], list[int]]) -> None:
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
        report.add(damage.describe() + _who(commitlog, damage.offset, damage.length))
    entries = 0
    floor = commitlog.min_offset
    for (topic, queue_id), walk in sorted(queues.items()):
        first = walk.first_live(floor)
        live = walk.end - first
        entries += live
        # entries of messages recorded as lost are reported (and accepted) as such
        recorded = sum(1 for q in known_lost.get((topic, queue_id), ()) if first <= q < walk.end)
        if live - recorded > walk.matched:
            report.add(f"consume queue {topic}/{queue_id}: {live - recorded - walk.matched} of "
                       f"{live} entries point at no matching commitlog record")
        for problem in walk.cq.file_problems():
            report.add(f"consume queue {topic}/{queue_id}: file {problem}")
    report.figures.update(commitlog_records=records, consume_queue_entries=entries,
                          unindexed_records=unindexed,
                          commitlog_corrupt_regions=len(commitlog.damage))


def _who(commitlog, offset: int, length: int) -> str:
    """The message a damaged region probably held, read without its CRC (its fields may be
    damaged too, so the report says "probably"); "" when even that does not decode."""
    try:
        size = _BODY_LEN.unpack(commitlog.read(offset, FIXED_SIZE)[:4])[0]
        if not FIXED_SIZE <= size <= length:
            return ""
        message = decode_record(commitlog.read(offset, size), offset, check_crc=False)
    except (KeyError, RocksTimerError, ValueError):
        return ""
    keys = ",".join(message.keys) or "-"
    return (f"; it probably held msg_id {message.msg_id} (topic {message.topic}, keys {keys}, "
            f"queue offset {message.queue_offset}; read past a failed CRC)")


def _check_timer(report: CheckReport, source) -> None:
    name = source.timer_name
    try:
        result = source.timer_check()
    except RocksTimerError as exc:  # a corrupt SST, for instance: the report says so
        report.add(f"timer engine {name}: {exc}")
        report.figures["timer"] = {"engine": name}
        return
    for problem in result.get("problems", []):
        report.add(f"timer engine {name}: {problem}")
    report.figures["timer"] = {k: v for k, v in result.items() if k != "problems"}


def _check_offsets(report: CheckReport, source, ends: dict[tuple[str, int], int],
                   until: int) -> None:
    try:
        table = source.consumer_offsets()
    except RocksTimerError as exc:
        report.add(str(exc))
        table = {}
    for (topic, group, queue_id), offset in sorted(table.items()):
        end = ends.get((topic, queue_id), 0)
        if offset > end:
            report.add(f"consumer group {group} on {topic}/{queue_id}: offset {offset} is "
                       f"beyond the queue's end {end}")
    for level, offset in sorted(source.level_offsets().items()):
        end = ends.get((SCHEDULE_TOPIC, level - 1), 0)
        if offset > end:
            report.add(f"delay level {level}: offset {offset} is beyond its queue's end {end}")
    reconciled = source.reconcile_from()
    if reconciled is not None and reconciled > until:
        report.add(f"timer engine {source.timer_name}: reconciled up to commitlog offset "
                   f"{reconciled}, beyond the commitlog end {until}: the deliveries it had "
                   "made there are lost")
    queue_offset = source.wheel_queue_offset()
    if queue_offset is not None:
        end = ends.get((WHEEL_TIMER_TOPIC, 0), 0)
        if queue_offset > end:
            report.add(f"wheel: enqueue offset {queue_offset} is beyond the timer topic's "
                       f"end {end}")
