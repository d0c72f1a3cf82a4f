"""The enqueue stage: timer-topic ConsumeQueue -> TimerLog unit + wheel slot update.

One pass reads the ``rmq_sys_wheel_timer`` queue 0 from the wheel's queue offset, bounded by a
budget, and for each message either parks it in the wheel (rolling it if it is a roll window or
more ahead) or, when it is already due, hands it to the dequeue stage's expired queue.
"""
from __future__ import annotations

import logging

from rocks_timer.errors import CorruptRecordError
from rocks_timer.message import REAL_TOPIC, TIMER_DEL_UNIQKEY, TIMER_OUT_MS, WHEEL_TIMER_TOPIC
from rocks_timer.timer.wheel.layouts import (MAGIC_DEFAULT, MAGIC_DELETE, MAGIC_ROLL, UNIT_SIZE,
                                             Unit, java_string_hash)
from rocks_timer.timer.wheel.state import EXPIRED_QUEUE_MAX, ExpiredItem, WheelState
from rocks_timer.timer.wheel.timerlog import TimerLog
from rocks_timer.timer.wheel.timerwheel import TimerWheel

log = logging.getLogger(__name__)
_CQ_PAGE = 256


class EnqueueService:
    """Moves timer-topic messages into the TimerLog and the wheel (RocketMQ's EnqueueGet/Put)."""

    def __init__(self, state: WheelState, wheel: TimerWheel, timerlog: TimerLog, message_store):
        self.state = state
        self.wheel = wheel
        self.timerlog = timerlog
        self.message_store = message_store
        self._hashes: dict[str, int] = {}

    def backlog(self) -> int:
        cq = self.message_store.consume_queue(WHEEL_TIMER_TOPIC, 0)
        return 0 if cq is None else max(0, cq.max_offset - self.state.queue_offset)

    def run(self, now_ms: int, budget: int) -> int:
        """One bounded pass; returns the number of queue entries consumed."""
        st = self.state
        st.write_time_ms = max(st.write_time_ms, st.floor(now_ms))
        cq = self.message_store.consume_queue(WHEEL_TIMER_TOPIC, 0)
        if cq is None:
            return 0
        if st.queue_offset < cq.min_offset:
            st.counters["cq_skipped"] += cq.min_offset - st.queue_offset
            log.warning("wheel enqueue: queue offset %d is below the queue's min %d; jumping",
                        st.queue_offset, cq.min_offset)
            st.queue_offset = cq.min_offset
        done = 0
        try:
            while done < budget and len(st.expired) < EXPIRED_QUEUE_MAX:
                entries = cq.entries(st.queue_offset, min(_CQ_PAGE, budget - done))
                if not entries:
                    break
                for entry in entries:
                    if len(st.expired) >= EXPIRED_QUEUE_MAX:
                        break
                    self._enqueue_entry(entry)
                    st.queue_offset = entry.queue_offset + 1
                    done += 1
        finally:
            self.timerlog.write_out()
        return done

    def _enqueue_entry(self, entry) -> None:
        st = self.state
        if st.replay_skip:
            if entry.queue_offset >= st.replay_end:
                st.replay_skip.clear()
            elif entry.commitlog_offset in st.replay_skip:
                st.counters["replay_skipped"] += 1  # its unit survived the crash
                if entry.queue_offset >= st.counted_below:
                    self._count_surviving(entry)
                return
        try:
            msg = self.message_store.get_message(entry.commitlog_offset, entry.size)
        except (KeyError, CorruptRecordError) as exc:
            st.counters["unreadable"] += 1
            log.error("wheel enqueue: cannot read timer message at %d: %s",
                      entry.commitlog_offset, exc)
            return
        try:
            out_ms = int(msg.properties[TIMER_OUT_MS])
        except (KeyError, ValueError):
            st.counters["bad_timer_out"] += 1
            log.error("wheel enqueue: message at %d has no valid TIMER_OUT_MS",
                      entry.commitlog_offset)
            return
        if out_ms < st.rewind_floor_ms and entry.queue_offset < st.replay_end:
            st.counters["rewind_skipped"] += 1  # its slot was read before the loss
            return
        is_marker = TIMER_DEL_UNIQKEY in msg.properties
        real_topic = msg.properties.get(REAL_TOPIC)
        if st.replay_deleted and not is_marker and entry.queue_offset < st.replay_end \
                and f"{real_topic}+{msg.msg_id}" in st.replay_deleted:
            st.counters["replay_cancelled"] += 1  # cancelled before the loss
            return
        w = st.write_time_ms
        if out_ms < w:  # already due: straight to delivery, no wheel entry, no metric change
            if is_marker:
                st.counters["expired_markers"] += 1
                self._watch(entry.commitlog_offset, False)
            else:
                st.counters["expired"] += 1
                st.expired.append(ExpiredItem(entry.queue_offset, entry.commitlog_offset,
                                              entry.size, msg))
                st.expired_outstanding.add(entry.queue_offset)
            return
        p, window = st.precision_ms, st.roll_window_slots
        magic = MAGIC_DEFAULT
        slot_ms = out_ms
        if out_ms - w >= window * p:
            magic |= MAGIC_ROLL
            overshoot = out_ms - w - window * p
            slot_ms = w + (window // 2) * p if overshoot < (window // 3) * p else w + window * p
            st.counters["roll_parks"] += 1
        if is_marker:
            magic |= MAGIC_DELETE
            st.counters["markers"] += 1
        slot = self.wheel.get_slot(slot_ms)
        unit = Unit(UNIT_SIZE, slot.last_pos, magic, w, slot_ms - w, entry.commitlog_offset,
                    entry.size, self._topic_hash(real_topic))
        pos = self.timerlog.append(unit.pack())
        first = pos if slot.time_ms < 0 else slot.first_pos
        self.wheel.put_slot(slot_ms, first, pos, slot.num + (-1 if is_marker else 1), slot.magic)
        if not (is_marker and self._recounting(entry)):
            st.add_timing(real_topic, -1 if is_marker else 1)
        st.counters["enqueued"] += 1
        if is_marker:
            self._watch(entry.commitlog_offset, True)

    def _count_surviving(self, entry) -> None:
        """A unit written after the checkpoint survived (its TimerLog bytes were synced, the
        checkpoint was not): the counts loaded with the checkpoint do not include it."""
        try:
            msg = self.message_store.get_message(entry.commitlog_offset, entry.size)
        except (KeyError, CorruptRecordError):
            return  # its dequeue reports it
        marker = TIMER_DEL_UNIQKEY in msg.properties
        topic = msg.properties.get(REAL_TOPIC)
        if self._recounting(entry) and (marker or f"{topic}+{msg.msg_id}"
                                        in self.state.replay_deleted):
            return  # recounted after a loss: a cancelled target and its marker count nothing
        self.state.add_timing(topic, -1 if marker else 1)

    def _recounting(self, entry) -> bool:
        """After a TimerLog loss the counts are rebuilt from the replay (they start at zero):
        a cancelled target is dropped, so its marker must not count either."""
        st = self.state
        return bool(st.replay_deleted) and entry.queue_offset < st.replay_end

    def _watch(self, commitlog_offset: int, landed: bool) -> None:
        if commitlog_offset in self.state.marker_watch:
            self.state.marker_watch[commitlog_offset] = landed

    def _topic_hash(self, topic: str | None) -> int:
        if not topic:
            return 0
        h = self._hashes.get(topic)
        if h is None:
            if len(self._hashes) > 10_000:
                self._hashes.clear()
            h = self._hashes[topic] = java_string_hash(topic)
        return h
