"""The dequeue stage: due slots -> CommitLog reads -> DueRecords for the deliverer.

Slot T is opened only when floor_p(now) > T and T is below the enqueue write time. Opening walks
the slot's units from last_pos back through prev_pos; delete markers are read first to collect
their "realTopic+uniqKey" keys, then normal units are handed out in enqueue order, possibly over
several calls. A roll unit becomes a copy back into the timer topic with TIMER_ROLL_TIMES + 1.
"""
from __future__ import annotations

import logging
from dataclasses import replace

from rocks_timer.errors import CorruptRecordError
from rocks_timer.message import (REAL_QID, REAL_TOPIC, TIMER_DEL_UNIQKEY, TIMER_DEQUEUE_MS,
                                 TIMER_ENQUEUE_MS, TIMER_OUT_MS, TIMER_ROLL_TIMES,
                                 WHEEL_TIMER_TOPIC, Message, encode_properties)
from rocks_timer.record import record_size
from rocks_timer.timer.handles import encode_handle
from rocks_timer.timer.store import DueRecord, TimerKey
from rocks_timer.timer.wheel.layouts import LONG_MAX, MAGIC_DELETE, MAGIC_ROLL
from rocks_timer.timer.wheel.state import SlotCursor, SlotProgress, WheelState
from rocks_timer.timer.wheel.timerlog import TimerLog
from rocks_timer.timer.wheel.timerwheel import TimerWheel

log = logging.getLogger(__name__)


def walk_slot(wheel: TimerWheel, timerlog: TimerLog, t_ms: int, state: WheelState | None = None
              ) -> tuple[SlotCursor, list]:
    """The slot's normal units (enqueue order) as a cursor, and its marker units."""
    cursor = SlotCursor(t_ms)
    markers = []
    slot = wheel.get_slot(t_ms)
    pos = slot.last_pos
    while pos >= 0:
        try:
            unit = timerlog.read_unit(pos)
        except (KeyError, CorruptRecordError) as exc:
            if state is not None:
                state.counters["broken_links"] += 1
            log.error("wheel slot %d: unit at %d unreadable: %s", t_ms, pos, exc)
            if 0 <= slot.first_pos < pos:
                # the chain is broken (a corrupt unit, or one lost with a short or missing
                # segment): the slot's older units lie between its first unit and here; find
                # them by position instead of through the lost link
                for upos, older in reversed(timerlog.units_between(slot.first_pos, pos)):
                    if older.slot_ms == t_ms:
                        _collect(cursor, markers, upos, older)
            break
        if unit.slot_ms != t_ms:
            break  # a link left from an older round
        _collect(cursor, markers, pos, unit)
        if unit.prev_pos >= pos:
            break
        pos = unit.prev_pos
    cursor.reverse()
    markers.reverse()
    return cursor, markers


def _collect(cursor: SlotCursor, markers: list, pos: int, unit) -> None:
    if unit.magic & MAGIC_DELETE and not unit.magic & MAGIC_ROLL:
        markers.append(unit)
    else:
        cursor.add(pos, unit.commitlog_offset, unit.write_ms, unit.record_size, unit.magic)


def convert(msg: Message, enqueue_ms: int, now_ms: int, roll: bool) -> Message:
    """The copy to put: back to the timer topic for a roll, else to REAL_TOPIC / REAL_QID."""
    props = dict(msg.properties)
    props[TIMER_ENQUEUE_MS] = str(enqueue_ms)
    props[TIMER_DEQUEUE_MS] = str(now_ms)
    if roll:
        try:
            times = int(props.get(TIMER_ROLL_TIMES, "0"))
        except ValueError:
            times = 0
        props[TIMER_ROLL_TIMES] = str(times + 1)
        topic, queue_id = WHEEL_TIMER_TOPIC, 0
    else:
        topic = props.pop(REAL_TOPIC, msg.topic)
        try:
            queue_id = int(props.pop(REAL_QID, "0"))
        except ValueError:
            queue_id = 0
    return replace(msg, topic=topic, queue_id=queue_id, properties=props, queue_offset=None,
                   commitlog_offset=None, store_ms=None)


def timer_key(msg: Message) -> tuple[TimerKey, str]:
    topic = msg.properties.get(REAL_TOPIC, msg.topic)
    try:
        out_ms = int(msg.properties.get(TIMER_OUT_MS, "0"))
    except ValueError:
        out_ms = 0
    msg_id = msg.msg_id or ""
    return TimerKey(out_ms, topic, msg_id), encode_handle(topic, out_ms + 1, msg_id)


class DequeueService:
    """Hands out due records within a budget and tracks what is in flight per slot."""

    def __init__(self, state: WheelState, wheel: TimerWheel, timerlog: TimerLog, message_store):
        self.state = state
        self.wheel = wheel
        self.timerlog = timerlog
        self.message_store = message_store

    def claim(self, now_ms: int, max_messages: int, max_bytes: int) -> list[DueRecord]:
        st = self.state
        out: list[DueRecord] = []
        used = 0

        def room() -> bool:
            return len(out) < max_messages and (used < max_bytes or not out)

        while st.expired and room():
            item = st.expired.popleft()
            copy = convert(item.message, LONG_MAX, now_ms, roll=False)
            key, handle = timer_key(item.message)
            out.append(DueRecord(key, copy, handle, item.size, ("x", item.queue_offset)))
            used += item.size
        limit = min(st.floor(now_ms), st.write_time_ms)  # open T only if T < both
        while room():
            cursor = st.cursor
            if cursor is None:
                if st.claim_time_ms >= limit:
                    break
                t = self.wheel.next_busy_slot(st.claim_time_ms, limit)
                if t is None:
                    st.claim_time_ms = limit
                    break
                st.claim_time_ms = t
                cursor = st.cursor = self._open(t)
                st.progress[t] = SlotProgress()
            progress = st.progress[cursor.time_ms]
            while cursor.index < len(cursor) and room():
                i = cursor.index
                cursor.index += 1
                record = self._claim_unit(cursor, i, now_ms)
                if record is not None:
                    out.append(record)
                    used += record.size
                    progress.outstanding.add(cursor.positions[i])
            if cursor.index >= len(cursor):
                progress.fully_claimed = True
                st.cursor = None
                st.claim_time_ms = cursor.time_ms + st.precision_ms
        st.advance_read_time()
        return out

    def _open(self, t_ms: int) -> SlotCursor:
        cursor, markers = walk_slot(self.wheel, self.timerlog, t_ms, self.state)
        for unit in markers:
            try:
                msg = self.message_store.get_message(unit.commitlog_offset, unit.record_size)
            except (KeyError, CorruptRecordError) as exc:
                self.state.counters["unreadable"] += 1
                log.error("wheel slot %d: marker at %d unreadable: %s", t_ms,
                          unit.commitlog_offset, exc)
                continue
            key = msg.properties.get(TIMER_DEL_UNIQKEY)
            if key:
                cursor.delete_keys.add(key)
        return cursor

    def _claim_unit(self, cursor: SlotCursor, i: int, now_ms: int) -> DueRecord | None:
        st = self.state
        offset, size = cursor.commitlog_offsets[i], cursor.sizes[i]
        try:
            msg = self.message_store.get_message(offset, size)
        except (KeyError, CorruptRecordError) as exc:
            st.counters["unreadable"] += 1
            log.error("wheel slot %d: message at %d unreadable: %s", cursor.time_ms, offset, exc)
            return None
        real_topic = msg.properties.get(REAL_TOPIC)
        if (cursor.delete_keys or st.replay_deleted) and (
                f"{real_topic}+{msg.msg_id}" in cursor.delete_keys
                or f"{real_topic}+{msg.msg_id}" in st.replay_deleted):
            # the marker's -1 already took it off the metrics (after a TimerLog loss: the
            # marker may have been replayed already due, where it reaches no slot)
            st.counters["deleted"] += 1
            return None
        magic = cursor.magics[i]
        roll = bool(magic & MAGIC_ROLL)
        copy = convert(msg, cursor.write_times[i], now_ms, roll)
        key, handle = timer_key(msg)
        roll_bytes = 0
        if roll:
            roll_bytes = record_size(len(copy.body), len(copy.topic.encode("utf-8")),
                                     len(encode_properties(copy.properties)))
        token = ("s", cursor.time_ms, cursor.positions[i], magic, real_topic, roll_bytes)
        return DueRecord(key, copy, handle, size, token)
