"""``WheelState``: the in-memory progress the enqueue and dequeue stages share.

Times are slot times (multiples of p). ``write_time_ms`` is RocketMQ's currWriteTimeMs: every
slot below it is closed to new units, so only slots below it may be dequeued. ``claim_time_ms``
is the next slot the dequeuer will open; ``read_time_ms`` (commitReadTimeMs) is the first slot
that still has undelivered records, the value the checkpoint stores.
"""
from __future__ import annotations

from array import array
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from rocks_timer.message import Message

EXPIRED_QUEUE_MAX = 1024  # RocketMQ's internal queues hold 1024


@dataclass(slots=True)
class ExpiredItem:
    """A message already due at enqueue: it skips the wheel and goes straight to delivery."""

    queue_offset: int
    commitlog_offset: int
    size: int
    message: Message


@dataclass(slots=True)
class SlotCursor:
    """The slot being claimed: its normal units in enqueue order and its delete keys."""

    time_ms: int
    positions: array = field(default_factory=lambda: array("q"))
    commitlog_offsets: array = field(default_factory=lambda: array("q"))
    write_times: array = field(default_factory=lambda: array("q"))
    sizes: array = field(default_factory=lambda: array("i"))
    magics: array = field(default_factory=lambda: array("i"))
    delete_keys: set[str] = field(default_factory=set)
    index: int = 0

    def add(self, pos: int, commitlog_offset: int, write_ms: int, size: int, magic: int) -> None:
        self.positions.append(pos)
        self.commitlog_offsets.append(commitlog_offset)
        self.write_times.append(write_ms)
        self.sizes.append(size)
        self.magics.append(magic)

    def reverse(self) -> None:
        for column in (self.positions, self.commitlog_offsets, self.write_times, self.sizes,
                       self.magics):
            column.reverse()

    def __len__(self) -> int:
        return len(self.positions)


@dataclass(slots=True)
class SlotProgress:
    """Claimed-but-not-completed units of one slot."""

    outstanding: set[int] = field(default_factory=set)
    fully_claimed: bool = False


@dataclass
class WheelState:
    """Progress of the stages plus counters; guarded by the engine's lock."""

    precision_ms: int
    slots_total: int
    roll_window_slots: int
    write_time_ms: int = 0
    claim_time_ms: int = 0
    read_time_ms: int = 0
    queue_offset: int = 0
    cursor: SlotCursor | None = None
    progress: "OrderedDict[int, SlotProgress]" = field(default_factory=OrderedDict)
    expired: deque = field(default_factory=deque)
    expired_outstanding: set[int] = field(default_factory=set)
    replay_skip: set[int] = field(default_factory=set)  # commitlog offsets already in the log
    replay_end: int = 0
    # queue entries below this were counted in ``timing`` as loaded (the checkpoint's master
    # queue offset): a replayed entry at or above it whose unit survived is counted on replay
    counted_below: int = 0
    # after a TimerLog loss, the delete keys of every cancel marker in the replayed range: a
    # target replayed already due goes straight to delivery, where its marker cannot reach it
    replay_deleted: set[str] = field(default_factory=set)
    rewind_floor_ms: int = -1  # after a TimerLog loss: entries due before this were delivered
    timing: dict[str, int] = field(default_factory=dict)
    # timing changes made by completions in slots at or after read_time: a replay from the
    # checkpoint (which stores read_time) delivers those slots again and makes them again, so
    # the counts saved beside the checkpoint leave them out (``timing_at_read_time``)
    slot_deltas: dict[int, dict[str, int]] = field(default_factory=dict)
    marker_watch: dict[int, bool | None] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("enqueued", "markers", "roll_parks", "rolls", "expired", "expired_markers", "deleted",
         "unreadable", "bad_timer_out", "replay_skipped", "cq_skipped", "broken_links",
         "delivered", "rewind_skipped", "replay_cancelled"), 0))

    def floor(self, t_ms: int) -> int:
        return t_ms - t_ms % self.precision_ms

    def add_timing(self, topic: str | None, delta: int) -> None:
        if topic:
            self.timing[topic] = self.timing.get(topic, 0) + delta

    def add_completed(self, slot_ms: int, topic: str | None, delta: int) -> None:
        """A completion in slot ``slot_ms`` changes the count of ``topic`` by ``delta``."""
        if topic:
            self.add_timing(topic, delta)
            deltas = self.slot_deltas.setdefault(slot_ms, {})
            deltas[topic] = deltas.get(topic, 0) + delta

    def timing_at_read_time(self) -> dict[str, int]:
        """The per-topic counts as a restart from ``read_time_ms`` sees them: without what
        completions in the slots it will read again did."""
        out = dict(self.timing)
        for deltas in self.slot_deltas.values():
            for topic, delta in deltas.items():
                out[topic] = out.get(topic, 0) - delta
        return {t: c for t, c in out.items() if c}

    def conservative_queue_offset(self) -> int:
        """Queue offset safe to restart from: no expired message still in memory below it."""
        if self.expired_outstanding:
            return min(self.queue_offset, min(self.expired_outstanding))
        return self.queue_offset

    def advance_read_time(self) -> None:
        while self.progress:
            t, prog = next(iter(self.progress.items()))
            if prog.fully_claimed and not prog.outstanding:
                self.progress.popitem(last=False)
            else:
                break
        front = next(iter(self.progress)) if self.progress else self.claim_time_ms
        self.read_time_ms = max(self.read_time_ms, min(front, self.claim_time_ms))
        for t_ms in [t for t in self.slot_deltas if t < self.read_time_ms]:
            del self.slot_deltas[t_ms]  # never read again: its completions are for good
