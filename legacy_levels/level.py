"""One delay level's scanner: reads its ``SCHEDULE_TOPIC_XXXX`` queue and delivers due messages.

The scanner walks the level's ConsumeQueue from ``read_offset``. Each CQ unit's tags code is the
deliver time (store time + the level's delay). Rules, as 4.x ``DeliverDelayedMessageTimerTask``:

- a unit not yet due stops this level only (strict FIFO inside a level);
- a deliver time more than one level-delay ahead of now (clock jump) is delivered now;
- a unit whose CommitLog record cannot be read (``CorruptRecordError`` / ``KeyError``) is skipped
  and counted; so is a record without ``REAL_TOPIC``;
- a copy whose ``REAL_TOPIC`` is ``RMQ_SYS_TRANS_HALF_TOPIC`` is dropped (and counted);
- sync mode puts the copy and waits: a failed put keeps the offset and retries the same unit
  after 100 ms of clock time, forever; async mode issues the put and moves on, leaving the commit
  to the level's :class:`~legacy_levels.async_deliver.PendingQueue`.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

from rocks_timer.errors import CorruptRecordError
from rocks_timer.message import DELAY, REAL_QID, REAL_TOPIC, SCHEDULE_TOPIC, Message

from legacy_levels.async_deliver import PendingQueue, PutResultProcess, PutStatus
from legacy_levels.offsets import DelayOffsetTable

TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
RETRY_AFTER_FAILURE_MS = 100
PAGE_ENTRIES = 256
UNREADABLE = (CorruptRecordError, KeyError)


class MalformedScheduleMessage(Exception):
    """A parked message without REAL_TOPIC: nowhere to deliver it (internal, counted as skipped)."""


def build_delivery_copy(stored: Message) -> Message:
    """The copy that goes to the real topic: a new CommitLog record, same client msg id.

    Keeps body, tags, keys, UNIQ_KEY, flag, born time and reconsume times. ``DELAY`` and every
    ``TIMER_*`` property are removed so the copy can never be scheduled again. ``REAL_TOPIC`` and
    ``REAL_QID`` are **kept**, as RocketMQ 4.x consumers see them (they name where the message was
    going, which is where it now is; tools that read them keep working). RocketMQ's other quirk,
    a stale ``DELAY`` left in the stored string, is not reproduced.
    """
    real_topic = stored.properties.get(REAL_TOPIC)
    if not real_topic:
        raise MalformedScheduleMessage(
            f"scheduled record at CommitLog offset {stored.commitlog_offset} has no {REAL_TOPIC}")
    try:
        queue_id = max(0, int(stored.properties.get(REAL_QID, "0")))
    except ValueError:
        queue_id = 0  # a bad REAL_QID still has a topic: deliver to queue 0 rather than drop it
    props = {name: value for name, value in stored.properties.items()
             if name != DELAY and not name.startswith("TIMER_")}
    return Message(topic=real_topic, body=stored.body, tags=stored.tags, keys=stored.keys,
                   flag=stored.flag, properties=props, msg_id=stored.msg_id, queue_id=queue_id,
                   born_ms=stored.born_ms, reconsume_times=stored.reconsume_times)


_NOT_DUE = object()


@dataclass
class LevelCounters:
    delivered: int = 0
    skipped: int = 0           # unreadable or malformed CommitLog records
    dropped_half: int = 0      # REAL_TOPIC = RMQ_SYS_TRANS_HALF_TOPIC
    put_failures: int = 0      # failed puts (sync) / failed heads (async)
    resends: int = 0           # puts issued again after a failure
    refused_flow: int = 0      # async: pending queue over the limit
    refused_blocked: int = 0   # async: head resent too often
    errors: int = 0            # unexpected exceptions in a scanner thread
    early_tags: int = 0        # entries whose tags code said due before their record does

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class LevelScanner:
    """Owns one level's read position, its retry time, its pending puts and its counters.

    ``read_offset`` is the next CQ unit to look at. In sync mode it always equals the level's
    committed offset in the table; in async mode the committed offset trails it by the pending
    puts and only moves by the in-order rule.
    """

    level: int
    delay_ms: int
    store: object
    offsets: DelayOffsetTable
    pending: PendingQueue | None = None      # None: sync delivery
    max_pending: int = 2_000
    read_offset: int = 0
    retry_at_ms: int = -(1 << 62)
    counters: LevelCounters = field(default_factory=LevelCounters)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def queue_id(self) -> int:
        return self.level - 1

    def consume_queue(self):
        return self.store.consume_queue(SCHEDULE_TOPIC, self.queue_id)

    # -- scanning --------------------------------------------------------------------------
    def scan(self, now_ms: int, budget: int) -> int:
        """Look at up to ``budget`` units; returns how many copies were delivered (sync) or issued."""
        with self.lock:
            if now_ms < self.retry_at_ms:
                return 0
            cq = self.consume_queue()
            if cq is None:
                return 0
            min_offset, max_offset = cq.min_offset, cq.max_offset
            if self.read_offset < min_offset or self.read_offset > max_offset:
                self.read_offset = min(max(self.read_offset, min_offset), max_offset)
                self._advance_to(self.read_offset)
            moved = 0
            while budget > 0 and self.read_offset < max_offset:
                entries = cq.entries(self.read_offset, min(PAGE_ENTRIES, budget))
                if not entries:
                    break
                for entry in entries:
                    budget -= 1
                    outcome = self._process(entry, now_ms)
                    if outcome is None:
                        return moved
                    moved += outcome
                    if budget <= 0:
                        break
            return moved

    def _process(self, entry, now_ms: int) -> int | None:
        """1 delivered/issued, 0 passed over, None: the level stops here for now."""
        deliver_ms = entry.tags_code
        if deliver_ms > now_ms + self.delay_ms:
            deliver_ms = now_ms  # the clock jumped back: deliver now rather than wait a clock-skew
        if deliver_ms > now_ms:
            return None
        if self.pending is not None:
            if len(self.pending) > self.max_pending:
                self.counters.refused_flow += 1
                return None
            if self.pending.head_blocks():
                self.counters.refused_blocked += 1
                return None
        copy = self._read_copy(entry.commitlog_offset, entry.size, now_ms)
        if copy is _NOT_DUE:
            return None
        if copy is None:
            self._advance_to(entry.queue_offset + 1)
            return 0
        if self.pending is None:
            return self._deliver_sync(entry, copy, now_ms)
        future = self._put_async(copy)
        self.pending.append(PutResultProcess(self.level, entry.queue_offset, entry.commitlog_offset,
                                             entry.size, copy.msg_id, future))
        self.read_offset = entry.queue_offset + 1
        return 1

    def _read_copy(self, commitlog_offset: int, size: int, now_ms: int):
        """The delivery copy, or None (counted) for unreadable, malformed or half messages, or
        ``_NOT_DUE`` when the record says it is due later than its queue entry's tags code did
        (a damaged entry must never make a delivery early; a clock step back still delivers)."""
        try:
            stored = self.store.get_message(commitlog_offset, size)
            copy = build_delivery_copy(stored)
        except UNREADABLE + (MalformedScheduleMessage,):
            self.counters.skipped += 1
            return None
        if now_ms < stored.store_ms + self.delay_ms <= now_ms + self.delay_ms:
            self.counters.early_tags += 1
            return _NOT_DUE
        if copy.topic == TRANS_HALF_TOPIC:
            self.counters.dropped_half += 1
            return None
        return copy

    def _deliver_sync(self, entry, copy: Message, now_ms: int) -> int | None:
        try:
            self.store.put_message(copy)
        except Exception:  # any failure: keep the offset, same unit again after 100 ms
            self.counters.put_failures += 1
            self.counters.resends += 1
            self.retry_at_ms = now_ms + RETRY_AFTER_FAILURE_MS
            return None
        self.counters.delivered += 1
        self._advance_to(entry.queue_offset + 1)
        return 1

    def _put_async(self, copy: Message) -> Future:
        try:
            return self.store.put_message_async(copy)
        except Exception as exc:  # a put refused on the spot fails like a failed future
            failed: Future = Future()
            failed.set_exception(exc)
            return failed

    def _advance_to(self, offset: int) -> None:
        """Move the read position; commit it unless async puts are still pending before it."""
        self.read_offset = offset
        if self.pending is None or not self.pending.records:
            if self.offsets.get(self.level, -1) != offset:
                self.offsets.update(self.level, offset)

    # -- async results ---------------------------------------------------------------------
    def handle_results(self, now_ms: int, *, stopped: bool = False) -> int:
        """Commit resolved async puts in order; returns how many were delivered."""
        if self.pending is None:
            return 0
        with self.lock:
            out = self.pending.handle(now_ms, self._resend, stopped=stopped)
            self.counters.delivered += out.committed
            self.counters.resends += out.resends
            self.counters.put_failures += out.failures
            self.counters.skipped += out.skipped
            if not self.pending.records:
                target = self.read_offset
            else:
                target = out.committed_offset
            if target is not None and self.offsets.get(self.level, -1) != target:
                self.offsets.update(self.level, target)
            return out.committed

    def _resend(self, record: PutResultProcess) -> Future | None:
        try:
            stored = self.store.get_message(record.commitlog_offset, record.size)
            copy = build_delivery_copy(stored)
        except UNREADABLE + (MalformedScheduleMessage,):
            return None
        return self._put_async(copy)

    def running_futures(self) -> list[Future]:
        if self.pending is None:
            return []
        with self.lock:
            return [r.future for r in self.pending.records
                    if r.status is PutStatus.RUNNING and r.future is not None]
