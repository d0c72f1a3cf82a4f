"""Listing pending wheel entries: walk busy slots from the claim position, bounded per call.

The wheel stores no index by due time, so a listing walks slots in order. Entries of one slot
share a due time except rolled ones, which are listed at their parking slot with their real due
time; ``next_after`` ("<slot ms>:<index in slot>") resumes the walk.
"""
from __future__ import annotations

from rocks_timer.errors import CorruptRecordError, InvalidHandleError
from rocks_timer.message import REAL_QID, REAL_TOPIC, TIMER_DEL_UNIQKEY
from rocks_timer.timer.store import PendingEntry, ScanPage
from rocks_timer.timer.wheel.dequeue import timer_key, walk_slot
from rocks_timer.timer.wheel.state import WheelState
from rocks_timer.timer.wheel.timerlog import TimerLog
from rocks_timer.timer.wheel.timerwheel import TimerWheel

def _parse_after(after: str) -> tuple[int, int]:
    try:
        t_text, _, index_text = after.partition(":")
        return int(t_text), int(index_text)
    except ValueError:
        raise InvalidHandleError(f"scan cursor {after!r} is not '<slot ms>:<index>'") from None


def scan_pending(state: WheelState, wheel: TimerWheel, timerlog: TimerLog, message_store, *,
                 from_ms: int | None, to_ms: int | None, topic: str | None, limit: int,
                 after: str | None, max_slots: int | None = None) -> ScanPage:
    """One page; ``max_slots`` caps the slots examined (default: the whole wheel)."""
    p = state.precision_ms
    max_slots = wheel.wheel_slots if max_slots is None else max_slots
    horizon = state.claim_time_ms + wheel.wheel_slots * p
    if after:
        t, skip = _parse_after(after)
    else:
        t, skip = state.claim_time_ms, 0
    claimed: set[int] = set()
    if state.cursor is not None:
        t = max(t, state.cursor.time_ms)
        if t == state.cursor.time_ms:
            claimed = set(state.cursor.positions[:state.cursor.index])
    else:
        t = max(t, state.claim_time_ms)
    capped = t + max_slots * p
    end = horizon if to_ms is None else min(horizon, state.floor(to_ms) + p)
    more = capped < end  # the per-call slot cap, not the range, ends this walk
    end = min(end, capped)
    entries: list[PendingEntry] = []
    while t < end:
        busy = wheel.next_busy_slot(t, end)
        if busy is None:
            t = end
            break
        if busy != t:
            t, skip = busy, 0
        cursor, markers = walk_slot(wheel, timerlog, t)
        deleted = set()
        for unit in markers:
            try:
                key = message_store.get_message(unit.commitlog_offset, unit.record_size
                                                ).properties.get(TIMER_DEL_UNIQKEY)
            except (KeyError, CorruptRecordError):
                continue
            if key:
                deleted.add(key)
        for i in range(skip, len(cursor)):
            if cursor.positions[i] in claimed:
                continue
            if len(entries) >= limit:
                return ScanPage(entries, f"{t}:{i}")
            try:
                msg = message_store.get_message(cursor.commitlog_offsets[i], cursor.sizes[i])
            except (KeyError, CorruptRecordError):
                continue
            if TIMER_DEL_UNIQKEY in msg.properties:
                continue  # a rolled marker
            real_topic = msg.properties.get(REAL_TOPIC, msg.topic)
            if f"{real_topic}+{msg.msg_id}" in deleted:
                continue
            key, handle = timer_key(msg)
            if topic is not None and real_topic != topic:
                continue
            if (from_ms is not None and key.due_ms < from_ms) or \
                    (to_ms is not None and key.due_ms > to_ms):
                continue
            try:
                queue_id = int(msg.properties.get(REAL_QID, "0"))
            except ValueError:
                queue_id = 0
            entries.append(PendingEntry(key.due_ms, real_topic, key.msg_id, handle,
                                        cursor.sizes[i], queue_id, msg.tags))
        claimed = set()
        t, skip = t + p, 0
    return ScanPage(entries, f"{end}:0" if more else None)
