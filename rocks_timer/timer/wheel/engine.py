"""``WheelTimerStore``: the RIP-43 file wheel behind the ``TimerStore`` protocol.

Owns ``<root>/timerwheel``, ``<root>/timerlog/`` and ``<root>/config/`` (checkpoint, metrics,
format). Timer messages live in the CommitLog under ``rmq_sys_wheel_timer`` queue 0; the enqueue
stage indexes them into the TimerLog and the wheel, the dequeue stage hands due ones out. Both
stages run in the caller's thread (``maintain``, ``claim_due``) under one lock.

Delivery is at-least-once, as in RocketMQ: after ``kill -9`` the slots after the checkpoint's
read time are read again and the queue entries after its offset enqueued again. ``cancel`` is
best-effort: it writes a delete marker into the target's slot and answers True when that marker
reached the wheel while the slot was still ahead of the dequeuer; the wheel cannot tell whether
the target exists (an unknown id also answers True).
"""
from __future__ import annotations

import logging
import random
import threading
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Sequence

from rocks_timer.clock import Clock
from rocks_timer.config import BrokerConfig
from rocks_timer.fileio import mkdir_durably
from rocks_timer.errors import (StoreClosedError, TimerFlowControlError,
                                UnsupportedOperationError)
from rocks_timer.message import (REAL_QID, REAL_TOPIC, TIMER_DEL_UNIQKEY, TIMER_DELIVER_MS,
                                 TIMER_OUT_MS, UNIQ_KEY, WHEEL_TIMER_TOPIC, Message, new_msg_id)
from rocks_timer.timer.handles import decode_handle, encode_handle
from rocks_timer.timer.store import (DueRecord, ScanPage, Scheduled, StoreStats, TimerKey,
                                     TimerRecord, TimerStore)
from rocks_timer.timer.wheel.checkpoint import (TimerCheckpointFile, TimerMetricsFile,
                                                check_format)
from rocks_timer.timer.wheel.dequeue import DequeueService
from rocks_timer.timer.wheel.enqueue import EnqueueService
from rocks_timer.timer.wheel.histogram import BASIS, count_slots
from rocks_timer.timer.wheel.layouts import (MAGIC_DELETE, MAGIC_ROLL, TIMER_BLANK_SLOTS,
                                             Checkpoint, effective_roll_window, slots_total_for,
                                             snap_precision, timer_out_ms)
from rocks_timer.timer.wheel.recovery import recover
from rocks_timer.timer.wheel.scan import scan_pending
from rocks_timer.timer.wheel.state import WheelState
from rocks_timer.timer.wheel.timerlog import TimerLog
from rocks_timer.timer.wheel.timerwheel import TimerWheel

log = logging.getLogger(__name__)
DEFAULT_TIMERLOG_SEGMENT = 64 << 20
ENQUEUE_BUDGET = 4096
CLEANUP_INTERVAL_MS = 30_000
RECALL_TAG = "_RECALL_TAG_"
FLOW_CONTROL_OFF = 2**31 - 1  # RocketMQ's default timerCongestNumEachSlot (Integer.MAX_VALUE)


def refuses(c: int, n: int, draw: int) -> bool:
    """RocketMQ's isReject for a slot holding ``c`` messages, N = ``n``, ``draw`` uniform in
    [0, 1000)."""
    if c <= n:
        return False
    return c >= 2 * n or draw > 1000 * (c - n) / (n + 0.1)


class WheelTimerStore(TimerStore):
    """The file wheel engine: TimerWheel + TimerLog + checkpoint over the CommitLog."""

    name = "wheel"
    exactly_once = False
    forgets_on_complete = False  # the checkpoint forgets; it syncs the CommitLog first

    def __init__(self, root: Path, message_store, config: BrokerConfig, *,
                 clock: Clock | None = None,
                 timerlog_segment_size: int = DEFAULT_TIMERLOG_SEGMENT,
                 rng: random.Random | None = None):
        self.root = Path(root)
        self.message_store = message_store
        self.config = config
        self.clock = clock or message_store.clock  # the clock that stamps what it reads
        self.precision_ms = p = snap_precision(config.timer_precision_ms)
        self.slots_total = slots_total_for(p)
        self.roll_window_slots = effective_roll_window(config.timer_roll_window_slots, p,
                                                       self.slots_total)
        mkdir_durably(self.root)
        check_format(self.root / "config" / "format.json",
                     {"precision_ms": p, "slots_total": self.slots_total,
                      "timerlog_segment_size": timerlog_segment_size})
        self._lock = threading.RLock()
        self._closed = False
        self._flow_rng = rng or random.Random()
        self.wheel = TimerWheel(self.root / "timerwheel", self.slots_total, p)
        self.timerlog = TimerLog(self.root / "timerlog", timerlog_segment_size)
        self._checkpoint = TimerCheckpointFile(self.root / "config" / "timercheck")
        self._metrics = TimerMetricsFile(self.root / "config" / "timermetrics")
        self.state = WheelState(p, self.slots_total, self.roll_window_slots)
        checkpoint = self._checkpoint.load()
        # the counts saved with this checkpoint (a power cut between the two files' writes
        # leaves the previous pair's counts in the metrics file's .bak)
        self.state.timing = self._metrics.load(checkpoint.counter)
        self._put_bytes = 0
        self._roll_bytes = 0
        self._version = checkpoint.counter  # pairs metrics and checkpoint across restarts
        now = self.clock.now_ms()
        self.recovery = recover(self.state, self.wheel, self.timerlog, message_store,
                                checkpoint, self._checkpoint.existed, now, TIMER_BLANK_SLOTS)
        self._enqueue = EnqueueService(self.state, self.wheel, self.timerlog, message_store)
        self._dequeue = DequeueService(self.state, self.wheel, self.timerlog, message_store)
        self._last_flush_ms = now
        self._last_cleanup_ms = now
        self._flush_locked(now)

    @classmethod
    def open(cls, root: Path | str, message_store, config: BrokerConfig, **kwargs
             ) -> "WheelTimerStore":
        return cls(Path(root), message_store, config, **kwargs)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the wheel timer store is closed")

    # -- producer side ----------------------------------------------------------------------------
    def timer_out_ms(self, deliver_ms: int) -> int:
        return timer_out_ms(deliver_ms, self.precision_ms)

    def schedule(self, records: Sequence[TimerRecord], now_ms: int) -> list[Scheduled]:
        """Write each record into the timer topic (all puts first, then wait for them)."""
        self._check_open()
        outs = [self.timer_out_ms(record.due_ms) for record in records]
        self._check_flow_control(outs)  # before anything is stored
        futures, results = [], []
        for record, out_ms in zip(records, outs):
            msg = record.message
            msg_id = msg.msg_id or new_msg_id()
            props = {UNIQ_KEY: msg_id, REAL_TOPIC: msg.topic,
                     REAL_QID: str(msg.queue_id or 0), TIMER_OUT_MS: str(out_ms)}
            timer_msg = replace(msg.with_properties(props), topic=WHEEL_TIMER_TOPIC, queue_id=0,
                                msg_id=msg_id, queue_offset=None, commitlog_offset=None,
                                store_ms=None)
            futures.append(self.message_store.put_message_async(timer_msg))
            results.append(Scheduled(encode_handle(msg.topic, out_ms + 1, msg_id), out_ms))
        written = sum(self.message_store.wait(f).size for f in futures)
        with self._lock:
            self._put_bytes += written
        return results

    def _check_flow_control(self, outs: list[int]) -> None:
        """``refuses`` per message, N = timer_congest_num_each_slot, c = the messages its slot
        holds (the wheel's count, plus the batch's earlier messages for that slot). RocketMQ's
        curve is kept as it is: it refuses ~99% just above N and ~1% just below 2N."""
        n = self.config.timer_congest_num_each_slot
        if n >= FLOW_CONTROL_OFF:
            return
        counts: dict[int, int] = {}
        with self._lock:
            for out_ms in outs:
                c = counts[out_ms] if out_ms in counts else self.wheel.get_slot(out_ms).num
                if refuses(c, n, self._flow_rng.randrange(1000)):
                    raise TimerFlowControlError(
                        f"timer message is under flow control: slot {out_ms} holds {c} messages; "
                        f"timer_congest_num_each_slot is {n}, refused at {2 * n} or more")
                counts[out_ms] = c + 1

    def cancel(self, handle: str, now_ms: int) -> bool:
        """Write a delete marker into the target's slot (best-effort, see the module doc)."""
        h = decode_handle(handle)
        if h.due_ms <= now_ms:
            return False  # due or delivered: a marker in the past could not act (RocketMQ rejects it)
        out_ms = self.timer_out_ms(h.due_ms)
        marker = Message(topic=WHEEL_TIMER_TOPIC, body=b"0", tags=RECALL_TAG, queue_id=0,
                         msg_id=h.msg_id,
                         properties={TIMER_DEL_UNIQKEY: f"{h.topic}+{h.msg_id}",
                                     TIMER_DELIVER_MS: str(h.due_ms), REAL_TOPIC: h.topic,
                                     REAL_QID: "0", TIMER_OUT_MS: str(out_ms)})
        with self._lock:
            self._check_open()
            result = self.message_store.put_message(marker)
            self._put_bytes += result.size
            watch = self.state.marker_watch
            watch[result.commitlog_offset] = None
            try:
                while watch[result.commitlog_offset] is None:
                    if self._enqueue.run(now_ms, ENQUEUE_BUDGET) == 0:
                        break  # enqueue is blocked (expired queue full): judge by time
                landed = watch[result.commitlog_offset]
            finally:
                del watch[result.commitlog_offset]
            if landed is None:
                return out_ms >= max(self.state.write_time_ms, self.state.claim_time_ms)
            return landed

    # -- deliverer side -----------------------------------------------------------------------------
    def claim_due(self, now_ms: int, max_messages: int, max_bytes: int) -> list[DueRecord]:
        with self._lock:
            self._check_open()
            self._enqueue.run(now_ms, ENQUEUE_BUDGET)
            return self._dequeue.claim(now_ms, max_messages, max_bytes)

    def complete(self, records: Sequence[DueRecord], commitlog_end: int | None) -> None:
        with self._lock:
            st = self.state
            for record in records:
                token = record.token
                if token[0] == "x":
                    st.expired_outstanding.discard(token[1])
                    st.counters["delivered"] += 1
                    continue
                _, t_ms, pos, magic, topic, roll_bytes = token
                progress = st.progress.get(t_ms)
                if progress is None or pos not in progress.outstanding:
                    continue  # already completed
                progress.outstanding.discard(pos)
                if magic & MAGIC_ROLL:
                    st.counters["rolls"] += 1
                    self._roll_bytes += roll_bytes
                    # a rolled marker re-enters with -1 again; keep its net effect at -1
                    st.add_completed(t_ms, topic, 1 if magic & MAGIC_DELETE else -1)
                else:
                    st.counters["delivered"] += 1
                    st.add_completed(t_ms, topic, -1)
            st.advance_read_time()

    def reconcile_from(self) -> int | None:
        return None

    def reconcile(self, keys: Iterable[TimerKey], commitlog_end: int) -> int:
        return 0

    # -- periodic work ---------------------------------------------------------------------------------
    def maintain(self, now_ms: int) -> None:
        with self._lock:
            self._check_open()
            self._enqueue.run(now_ms, ENQUEUE_BUDGET)
            if now_ms - self._last_flush_ms >= self.config.timer_flush_interval_ms:
                self._flush_locked(now_ms)
            if now_ms - self._last_cleanup_ms >= CLEANUP_INTERVAL_MS:
                self._last_cleanup_ms = now_ms
                self.timerlog.delete_expired(self.message_store.min_offset)

    def sync(self) -> None:
        """Make everything enqueued so far survive power loss (the broker's periodic flush)."""
        self.flush()

    def flush(self, now_ms: int | None = None) -> None:
        with self._lock:
            self._check_open()
            self._flush_locked(self.clock.now_ms() if now_ms is None else now_ms)

    def _flush_locked(self, now_ms: int) -> None:
        """CommitLog (the timer topic and the delivered copies), TimerLog, then wheel pages,
        then the checkpoint that points into all three: the checkpoint never moves past a
        message whose delivered or rolled copy is not on disk yet (ARCHITECTURE §4)."""
        st = self.state
        self.message_store.sync()
        flush_pos = self.timerlog.flush()
        self.wheel.flush()
        self._version += 1
        # the counts first, as a restart from this checkpoint's read time will count them
        # (``timing_at_read_time``), tagged with the checkpoint's version; then the checkpoint
        self._metrics.save(st.timing_at_read_time(), now_ms, self._version)
        self._checkpoint.save(Checkpoint(st.read_time_ms, flush_pos,
                                         st.conservative_queue_offset(), st.queue_offset,
                                         self._version, now_ms, self._version))
        self._last_flush_ms = now_ms

    # -- listing and figures ---------------------------------------------------------------------------
    def scan(self, *, from_ms: int | None = None, to_ms: int | None = None,
             topic: str | None = None, limit: int = 100, after: str | None = None) -> ScanPage:
        with self._lock:
            self._check_open()
            now_ms = self.clock.now_ms()
            for _ in range(64):  # list what was sent but not yet enqueued, too (bounded)
                if self._enqueue.backlog() == 0 or self._enqueue.run(now_ms, ENQUEUE_BUDGET) == 0:
                    break
            return scan_pending(self.state, self.wheel, self.timerlog, self.message_store,
                                from_ms=from_ms, to_ms=to_ms, topic=topic, limit=limit,
                                after=after)

    # -- by business key, reschedule, due counts ------------------------------------------------
    due_basis = BASIS
    _NO_INDEX = ("the file wheel keeps no index by key and its cancel is a best-effort marker, "
                 "so it cannot {} exactly; use timer_engine='rocksdb'")

    def find(self, topic: str, key: str, *, limit: int = 100, after: str | None = None):
        raise UnsupportedOperationError(self._NO_INDEX.format("find messages by key"))

    def cancel_by_key(self, topic: str, key: str, now_ms: int):
        raise UnsupportedOperationError(self._NO_INDEX.format("cancel by key"))

    def reschedule(self, handles, due_ms: int, now_ms: int):
        raise UnsupportedOperationError(self._NO_INDEX.format("reschedule"))

    def reschedule_by_key(self, topic: str, key: str, due_ms: int, now_ms: int):
        raise UnsupportedOperationError(self._NO_INDEX.format("reschedule"))

    def count_due(self, ranges) -> list[int]:
        """From the slot counts (see ``wheel.histogram``): not exact for rolled messages."""
        with self._lock:
            self._check_open()
            now_ms = self.clock.now_ms()
            for _ in range(64):  # count what was sent but not yet enqueued in its slot (bounded)
                if self._enqueue.backlog() == 0 or self._enqueue.run(now_ms, ENQUEUE_BUDGET) == 0:
                    break
            outside = len(self.state.expired_outstanding) + self._enqueue.backlog()
            return count_slots(self.wheel, self.state, ranges, outside)

    def next_due_ms(self) -> int | None:
        return None  # slots are read at the precision; the loop's interval is the wheel's tick

    def pending_count(self) -> int:
        with self._lock:
            wheel = sum(c for c in self.state.timing.values())
            expired = len(self.state.expired_outstanding)
            backlog = 0 if self._closed else self._enqueue.backlog()
            return max(0, wheel + expired + backlog)

    def enqueue_offset(self) -> int | None:
        """How far the enqueue stage has read the timer topic's queue (``check``)."""
        return self.state.queue_offset

    def check(self) -> dict:
        """Read-only walk of the TimerLog for ``Broker.check``: corrupt units are problems
        (they were skipped, and their messages are found through their slot's other units)."""
        with self._lock:
            self._check_open()
            units = sum(1 for _ in self.timerlog.scan_units(self.timerlog.min_offset))
            problems = [f"timerlog: {length} corrupt bytes at offset {offset} skipped"
                        for offset, length in sorted(self.timerlog.damage.items())]
        return {"engine": self.name, "pending": self.pending_count(), "timerlog_units": units,
                "corrupt_units": self.timerlog.corrupt_units, "problems": problems}

    def stats(self) -> StoreStats:
        with self._lock:
            st = self.state
            bytes_written = {
                "commitlog_timer_topic": self._put_bytes,
                "timerlog": self.timerlog.bytes_written,
                "wheel": self.wheel.bytes_flushed,  # dirty pages flushed x page size
                "checkpoint": self._checkpoint.bytes_written,
                "metrics": self._metrics.bytes_written,
                "rolls": self._roll_bytes,
            }
            extra = {"read_time_ms": st.read_time_ms, "claim_time_ms": st.claim_time_ms,
                     "write_time_ms": st.write_time_ms, "queue_offset": st.queue_offset,
                     "precision_ms": self.precision_ms, "slots_total": self.slots_total,
                     "roll_window_slots": self.roll_window_slots,
                     "roll_count": st.counters["rolls"],
                     "wheel_slot_bytes_written": self.wheel.slot_bytes_written,
                     "timing_count": {t: c for t, c in st.timing.items() if c},
                     "timerlog_segments": len(self.timerlog.segment_starts()),
                     "recovery": dict(self.recovery), **st.counters}
        return StoreStats(self.name, self.pending_count(), bytes_written, extra)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._flush_locked(self.clock.now_ms())
            self._closed = True
            self.wheel.close()
            self.timerlog.close()

    def __enter__(self) -> "WheelTimerStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

