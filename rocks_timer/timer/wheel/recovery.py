"""Recovery on open: revise the wheel from the TimerLog tail, truncate torn units, pick offsets.

RocketMQ's load/recover: rescan from one segment before the checkpoint's flush position,
revising each unit's slot so last_pos is its newest unit; cut the log where its torn tail starts
(a unit whose size is not 52 or whose magic is bad with no valid unit after it; a bad unit with
valid ones after it is corruption, counted and skipped, never a reason to cut); restart the
enqueue from the smaller of the last unit's queue offset + 1 and the checkpoint's; never look
back further than the wheel can hold. A TimerLog (or wheel file) that lost what the checkpoint
says was durable re-enqueues the timer topic from its start (``_lost_units``).
"""
from __future__ import annotations

import logging

from rocks_timer.errors import CorruptRecordError
from rocks_timer.message import TIMER_DEL_UNIQKEY, WHEEL_TIMER_TOPIC
from rocks_timer.timer.wheel.layouts import LONG_MAX, Checkpoint
from rocks_timer.timer.wheel.state import WheelState
from rocks_timer.timer.wheel.timerlog import TimerLog
from rocks_timer.timer.wheel.timerwheel import IGNORE, TimerWheel

log = logging.getLogger(__name__)
REPLAY_SKIP_WINDOW = 1 << 20  # bytes of TimerLog before the flush point whose units dedupe replay


def recover(state: WheelState, wheel: TimerWheel, timerlog: TimerLog, message_store,
            checkpoint: Checkpoint, existed: bool, now_ms: int, blank_slots: int) -> dict:
    p = state.precision_ms
    floor_now = state.floor(now_ms)
    if existed:
        read_time = max(checkpoint.read_time_ms, floor_now - (state.slots_total - blank_slots) * p)
    else:
        read_time = floor_now
    pos0 = max(0, checkpoint.flush_pos - timerlog.segment_size)
    skip_from = max(pos0, checkpoint.flush_pos - REPLAY_SKIP_WINDOW)
    last = None
    scanned = revised = 0
    skip: set[int] = set()
    for pos, unit in timerlog.scan_units(pos0):
        scanned += 1
        last = unit
        if pos >= skip_from:
            skip.add(unit.commitlog_offset)
        if unit.slot_ms >= read_time:  # older slots are done; never touch them
            wheel.revise_slot(unit.slot_ms, IGNORE, pos, force=True)
            revised += 1
    end = timerlog.scan_end
    truncated = timerlog.truncate(end)
    cleared = 0
    # slots pointing at or past the end: their units were torn off here, or, after a power
    # cut, the wheel's pages (written back on the kernel's schedule) outlived TimerLog bytes
    # that were never synced; left alone, new units would chain onto positions reused by others
    # (RocketMQ's recover runs checkPhyPos every time too)
    min_first = wheel.check_phy_pos(read_time, end - 1)
    if truncated or min_first != LONG_MAX:
        if truncated:
            log.warning("wheel recovery: truncated %d torn bytes of the timerlog at %d",
                        truncated, end)
        if min_first < end:
            for pos, unit in timerlog.scan_units(min_first):
                if unit.slot_ms >= read_time:
                    wheel.revise_slot(unit.slot_ms, IGNORE, pos, force=False)
        for slot in wheel.slots_pointing_past(read_time, end):
            wheel.clear_slot(slot.time_ms)  # every unit of it was torn off
            cleared += 1

    cq = message_store.consume_queue(WHEEL_TIMER_TOPIC, 0)
    last_unit_offset = None
    if last is not None and cq is not None:
        try:
            msg = message_store.get_message(last.commitlog_offset, last.record_size)
            entry = cq.get(msg.queue_offset) if msg.queue_offset is not None else None
            if entry is not None and entry.commitlog_offset == last.commitlog_offset:
                last_unit_offset = msg.queue_offset + 1
        except (KeyError, CorruptRecordError) as exc:
            log.warning("wheel recovery: last unit's message unreadable: %s", exc)
    queue_offset = checkpoint.queue_offset
    if last_unit_offset is not None:
        queue_offset = min(queue_offset, last_unit_offset)
    if cq is None:
        queue_offset = 0
    else:
        queue_offset = min(max(queue_offset, cq.min_offset), cq.max_offset)

    state.read_time_ms = state.claim_time_ms = state.write_time_ms = read_time
    state.queue_offset = queue_offset
    state.replay_end = max(last_unit_offset or 0, checkpoint.master_queue_offset)
    state.counted_below = checkpoint.master_queue_offset if existed else 0
    state.replay_skip = skip if queue_offset < state.replay_end else set()
    lost = _lost_units(timerlog, checkpoint, existed, end)
    if existed and wheel.created and checkpoint.flush_pos > 0:
        lost.append("the timer wheel file was missing")
    if lost and cq is not None:
        # units the checkpoint counted as durable are gone: enqueue the timer topic again from
        # its first retained entry, skipping what surviving units index and what the dequeuer
        # had already passed (at-least-once, as the wheel always is)
        log.error("wheel recovery: %s; re-enqueueing the timer topic from queue offset %d",
                  "; ".join(lost), cq.min_offset)
        state.replay_skip = {unit.commitlog_offset
                             for _, unit in timerlog.scan_units(timerlog.min_offset)}
        state.queue_offset = queue_offset = cq.min_offset
        state.replay_end = cq.max_offset
        state.rewind_floor_ms = checkpoint.read_time_ms if existed else -1
        state.replay_deleted = _delete_keys(message_store, cq)
        # the counts loaded with the checkpoint cover units that are gone: count again, from
        # zero, everything the replay parks or finds surviving (``EnqueueService._recounting``)
        state.timing = {}
        state.counted_below = cq.min_offset
    return {"pos0": pos0, "scanned_units": scanned, "revised_slots": revised,
            "truncated_bytes": truncated, "cleared_slots": cleared,
            "corrupt_units": timerlog.corrupt_units, "lost": lost,
            "queue_offset": queue_offset, "read_time_ms": read_time,
            "last_unit_queue_offset": last_unit_offset if last_unit_offset is not None else -1,
            "checkpoint_existed": existed}


def _delete_keys(message_store, cq) -> set[str]:
    """The delete keys of the cancel markers in the timer topic (a scan of the whole queue, on
    the loss path only): replayed targets are matched against them at enqueue."""
    keys: set[str] = set()
    offset = cq.min_offset
    while offset < cq.max_offset:
        entries = cq.entries(offset, 1024)
        if not entries:
            break
        for entry in entries:
            try:
                msg = message_store.get_message(entry.commitlog_offset, entry.size)
            except (KeyError, CorruptRecordError):
                continue
            key = msg.properties.get(TIMER_DEL_UNIQKEY)
            if key:
                keys.add(key)
        offset = entries[-1].queue_offset + 1
    return keys


def _lost_units(timerlog: TimerLog, checkpoint: Checkpoint, existed: bool, end: int
                ) -> list[str]:
    lost = [f"timerlog segment {name} is missing" for name in timerlog.missing_segments]
    lost += [f"timerlog segment {name} is short" for name in timerlog.short_segments]
    if existed and end < checkpoint.flush_pos:
        lost.append(f"timerlog ends at {end}, before the checkpoint's flushed position "
                    f"{checkpoint.flush_pos}")
    return lost
