"""``Broker``: the facade a Python program uses (docs/LIBRARY.md).

It owns the data directory (an exclusive lock file), the MessageStore (CommitLog + ConsumeQueues),
the configured timer engine with its deliverer, and the legacy level service. ``tick()`` runs one
synchronous step of every service at the clock's time; ``start()`` runs them on background
threads until ``stop()``/``close()``.
"""
from __future__ import annotations

import datetime as dt
import fcntl
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from rocks_timer import datadir
from rocks_timer.broker_keys import KeyedOperations
from rocks_timer.check import CheckReport, check_broker
from rocks_timer.clock import Clock, ManualClock, SystemClock
from rocks_timer.commitlog import LostRange
from rocks_timer.commitlog_loss import LossRecord
from rocks_timer.config import BrokerConfig
from rocks_timer.consume_read import PulledBatch
from rocks_timer.consumer_offsets import ConsumerOffsets
from rocks_timer.errors import (CorruptRecordError, EngineNotAvailableError,
                                RocksTimerError, StoreClosedError,
                                StoreLockedError)
from rocks_timer.health import PERIODIC_FLUSH, TIMER_STEP, Health
from rocks_timer.message import TIMER_OUT_MS, Message, msg_id_supplier
from rocks_timer.message_store import MessageStore
from rocks_timer.private import (FILE_MODE, hold_owner_only_umask, is_data_dir_or_new,
                                 private_dir, release_owner_only_umask, tighten)
from rocks_timer.routing import route, route_batch
from rocks_timer.timer.deliverer import Deliverer
from rocks_timer.timer.rocksdb import setaside
from rocks_timer.timer.rocksdb.setaside import SetAsideMessage
from rocks_timer.timer.histogram import bound_counts
from rocks_timer.timer.store import (Compacting, ScanPage, Scheduled, TimerRecord, TimerStore,
                                     maker, new_timer_record)
from rocks_timer.timer.tally import new_delay_tally

log = logging.getLogger(__name__)
_RETENTION_EVERY_MS = 10_000
# The timer loop's pace when few messages fall due at a time: after a step that claimed fewer
# than _GATHER_BELOW, the next one starts at least timer_precision_ms / _GATHER_DIVISOR after it
# (10 ms at the default 100). Stepping for every message that fell due took the GIL and the
# store lock from producers for a step's fixed cost each time (docs/DECISIONS.md, issue 26).
_GATHER_DIVISOR = 10
_GATHER_BELOW = 256


class SendResult(NamedTuple):
    """What ``send`` returns. ``handle`` is None for messages stored at once and level messages
    (RocketMQ gives recall handles to timer messages only). A NamedTuple: immutable, and the
    cheapest object to build once per message sent."""

    msg_id: str
    handle: str | None
    deliver_at_ms: int
    topic: str
    queue_id: int
    route: str  # "immediate", "level" or the timer engine's name


_new_send_result = maker(SendResult)


def wake_in_ms(now_ms: int, next_due_ms: int | None, interval_ms: int) -> int:
    """How long the timer loop sleeps after a step that left nothing in flight.

    An engine that knows its next due time is woken then (at most one interval away). One that
    does not (the file wheel reads whole slots: a slot opens once the clock passes its end) is
    woken on the precision grid, where the next slot opens; sleeping a whole interval from
    wherever the step ended made the wheel deliver up to two slots late."""
    if next_due_ms is None:
        return interval_ms - now_ms % interval_ms
    return min(interval_ms, max(0, next_due_ms - now_ms))


def _holds_timer_copies(messages: MessageStore) -> bool:
    """Whether the CommitLog holds a delivered timer message (its first one ends the walk; a
    data dir without a timer store and record is new, and its CommitLog empty, but for this)."""
    return any(TIMER_OUT_MS in m.properties for m in messages.iter_messages(0))

def _open_timer_store(root: Path, config: BrokerConfig, messages: MessageStore,
                      stored: dict | None) -> TimerStore:
    if config.timer_engine == "memory":
        from rocks_timer.timer.memory import MemoryTimerStore
        return MemoryTimerStore()
    if config.timer_engine == "rocksdb":
        from rocks_timer.timer.rocksdb import RocksTimerStore
        store_dir = root / "timer-rocksdb"
        missing = not (store_dir.is_dir() and any(store_dir.iterdir()))
        if missing and not stored and _holds_timer_copies(messages):
            raise CorruptRecordError(
                f"data dir {root} has no engine record and no timer store, but its CommitLog "
                f"holds delivered timer messages: a timer engine ran here, and its store (and "
                f"record) are gone; refusing to start an empty store over its pending messages; "
                f"restore {store_dir} and {root / datadir.FILE} from a copy, or run `rtimer "
                f"repair`, which names what is lost and makes an empty store",
                where=str(store_dir))
        if stored and stored.get("timer_engine") == "rocksdb" and missing:
            # its record is written once the store opened: the store was there and is gone
            raise CorruptRecordError(
                f"data dir {root} ran the rocksdb timer engine ({root / datadir.FILE}) but its "
                f"timer store {store_dir} is missing or empty: refusing to start an empty one "
                f"over its pending messages; restore the directory from a copy, or run `rtimer "
                f"repair`, which names what is lost and makes an empty store", where=str(store_dir))
        return RocksTimerStore.open(store_dir, config)
    try:
        from rocks_timer.timer.wheel import WheelTimerStore
    except ImportError as exc:
        raise EngineNotAvailableError(f"timer engine 'wheel' is not available: {exc}") from None
    return WheelTimerStore.open(root / "wheel", messages, config)


def _open_level_service(root: Path, config: BrokerConfig, messages: MessageStore, clock: Clock,
                        health: Health):
    try:
        from legacy_levels import ScheduleMessageService
    except ImportError as exc:
        log.warning("legacy delay levels are not available: %s", exc)
        return None
    service = ScheduleMessageService(root, messages, config, clock, health=health)
    service.load()
    return service


def _record_reconcile_loss(timer: TimerStore, messages: MessageStore) -> None:
    """The timer engine reconciled deliveries up to an offset the CommitLog no longer reaches:
    the copies it delivered there are gone. Recorded before reconciliation moves the checkpoint
    back to the end (``commitlog_loss``)."""
    reconciled, end = timer.reconcile_from(), messages.max_offset
    if reconciled is not None and reconciled > end:
        messages.record_loss([LostRange(end, reconciled, "-", "behind the timer engine's "
                                        "reconcile checkpoint (it had delivered there)")])


class Broker(KeyedOperations):
    """One data directory, one process: send, scan, cancel, pull, stats, tick/start/stop;
    find / cancel / reschedule by key and the due histogram come from ``KeyedOperations``."""

    def __init__(self, path: Path | str, config: BrokerConfig | None = None,
                 clock: Clock | None = None):
        opening = time.monotonic()
        self.path = Path(path)
        self.previous_stop_clean: bool | None = None  # set by _lock_data_dir
        self.config = (config or datadir.adopt(path, BrokerConfig())).validate()
        self.clock = clock or SystemClock()
        hold_owner_only_umask()  # RocksDB's own files get 0600 too (rocks_timer.private)
        self._lock_fd: int | None = None
        try:
            whole = is_data_dir_or_new(self.path)
            private_dir(self.path)
            self._lock_fd = self._lock_data_dir()
            tighten(self.path, whole)  # what an older version made becomes owner-only
            if not whole:
                log.info("data dir %s holds files rtimer did not make: their permissions "
                         "and the directory's are left alone", self.path)
        except BaseException:
            self._release()
            raise
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._flusher: threading.Thread | None = None  # async mode, once started
        self._wake = threading.Event()  # set by stop() and by sends due before the wake-up
        self._wake_at_ms = 0
        self._tick_lock = threading.Lock()
        self._last_retention_ms = 0
        self._last_flush_ms = self.clock.now_ms()
        self._async_flush = self.config.flush_disk_type == "async"
        self.sent = {"immediate": 0, "level": 0, "timer": 0}
        self.cancelled = 0
        # timer records a front parks itself (pop's invisibility records, ``park``) and takes
        # back (acks, ``unpark``): timer messages, but no producer sent them
        self.parked = self.unparked = 0
        self.delays = new_delay_tally()  # the delays timer messages are sent with, per batch
        self.health = Health(self.clock, self.config.failure_log_interval_ms,
                             self.config.service_retry_max_backoff_ms)
        try:
            stored_format = datadir.check(self.path, self.config)
            self.messages = MessageStore.open(self.path, self.config, self.clock)
            self.timer = _open_timer_store(self.path, self.config, self.messages, stored_format)
            self.deliverer = Deliverer(self.timer, self.messages, self.config, self.clock,
                                       self.health)
            _record_reconcile_loss(self.timer, self.messages)
            self.deliverer.reconcile()
            self.levels = _open_level_service(self.path, self.config, self.messages, self.clock,
                                              self.health)
            datadir.record(self.path, self.config, stored_format)
            self.consumer_offsets = ConsumerOffsets(self.path)
            try:
                self.clamped_offsets = self.consumer_offsets.clamp(self.max_offset)
            except CorruptRecordError as exc:  # consume says so; sends and deliveries go on
                log.error("%s", exc)
                self.clamped_offsets = [str(exc)]
        except BaseException:
            self._close_opened()
            self._release()
            raise
        # how long the open took: after an unclean stop, that is the recovery (CommitLog and
        # ConsumeQueue repair, the engine's own recovery, the deliverer's reconcile)
        self.open_ms = round((time.monotonic() - opening) * 1000)

    @classmethod
    def open(cls, path: Path | str, config: BrokerConfig | None = None,
             clock: Clock | None = None) -> "Broker":
        return cls(path, config, clock)

    # -- data dir ---------------------------------------------------------------------------
    def _lock_data_dir(self) -> int:
        fd = os.open(self.path / "broker.lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise StoreLockedError(f"data dir {self.path} is in use by pid {holder}; stop it or "
                                   "talk to it (rtimer commands do)") from None
        # a clean close empties the lock file; a pid left in it means the last run did not close
        self.previous_stop_clean = not os.pread(fd, 64, 0).strip()
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        return fd

    def _close_opened(self) -> None:
        """A failed open closes what it had opened (threads, files, RocksDB locks)."""
        for part in ("levels", "timer", "messages"):
            opened = self.__dict__.get(part)
            if opened is not None:
                try:
                    opened.close()
                except Exception:  # noqa: BLE001 - the open's own error is the one to raise
                    log.exception("closing %s after a failed open", part)

    def _release(self, clean: bool = False) -> None:
        if self._lock_fd is not None:
            if clean:
                os.ftruncate(self._lock_fd, 0)
            os.close(self._lock_fd)
            self._lock_fd = None
        if not getattr(self, "_umask_released", False):
            self._umask_released = True
            release_owner_only_umask()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"broker on {self.path} is closed")

    # -- send -------------------------------------------------------------------------------
    def send(self, message: Message, *, delay_level: int | None = None, delay_ms: int | None = None,
             deliver_at_ms: int | None = None, deliver_at: dt.datetime | None = None
             ) -> SendResult:
        """Store one message at once, on a delay level or in the timer engine (ARCHITECTURE §3)."""
        self._check_open()
        now_ms = self.clock.now_ms()
        return self._send_routed(route(
            message, now_ms=now_ms, config=self.config, delay_level=delay_level,
            delay_ms=delay_ms, deliver_at_ms=deliver_at_ms, deliver_at=deliver_at), now_ms)[0]

    def send_batch(self, messages: Sequence[Message], **schedule: Any) -> list[SendResult]:
        """Validate every message first (nothing is stored if one is bad), then store: timer
        messages in one atomic batch of the engine, the others through one group commit."""
        self._check_open()
        now_ms, config = self.clock.now_ms(), self.config
        if type(messages) is not list:
            messages = list(messages)
        if len(messages) == 1 and not schedule:  # a front's single send: what ``send`` does
            return self._send_routed(route(messages[0], now_ms=now_ms, config=config), now_ms)
        unnamed = sum([getattr(m, "msg_id", None) is None for m in messages])
        ids = msg_id_supplier(unnamed) if unnamed > 1 else None
        routes = route_batch(messages, now_ms=now_ms, config=config, new_id=ids, **schedule)
        timers = [r for r in routes if r.kind == "timer"]
        if len(timers) == len(routes):
            return self._schedule_routed(routes, now_ms)
        direct = [r for r in routes if r.kind != "timer"]
        if self.levels is None and any(r.kind == "level" for r in direct):
            raise EngineNotAvailableError("delay levels are not available in this build")
        stored = iter(self._schedule_routed(timers, now_ms) if timers else ())
        put = iter(self._put_routed(direct, now_ms))
        return [next(stored) if r.kind == "timer" else next(put) for r in routes]

    def _send_routed(self, routed, now_ms: int) -> list[SendResult]:
        """One message (validated and routed) stored where its route says: its one result."""
        if routed.kind == "timer":
            return self._schedule_routed([routed], now_ms)
        return self._put_routed([routed], now_ms)

    def _schedule_routed(self, routes: list, now_ms: int) -> list[SendResult]:
        """Timer messages (validated and routed) into the timer engine, in one batch."""
        timer = self.timer
        messages = [r.message for r in routes]
        dues = [r.due_ms for r in routes]
        scheduled = timer.schedule(list(map(new_timer_record, zip(dues, messages))), now_ms)
        name, wake_at = timer.name, self._wake_at_ms
        results = list(map(_new_send_result, [
            (m.msg_id, s.handle, due, m.topic, m.queue_id or 0, name)
            for due, s, m in zip(dues, scheduled, messages)]))
        self.sent["timer"] += len(routes)
        self.delays.add(dues, now_ms)
        self._wake_if_sooner(scheduled, wake_at)
        return results

    def _wake_if_sooner(self, scheduled: list[Scheduled], wake_at: int) -> None:
        """Wake the timer loop when a key just stored falls due before its planned wake-up
        (``wake_at``)."""
        if any([s.key_due_ms < wake_at for s in scheduled]):
            self._wake.set()

    def park(self, records: Sequence[TimerRecord], now_ms: int | None = None
             ) -> list[Scheduled]:
        """Park timer records a front built itself (pop's invisibility records: a copy
        addressed to the retry or dead-letter topic, due when the invisible time ends) in the
        timer engine, in one atomic batch. Counted in ``parked``, not in ``sent`` (no producer
        sent them); the timer loop is woken when one falls due before its planned wake-up."""
        self._check_open()
        now_ms = self.clock.now_ms() if now_ms is None else now_ms
        scheduled = self.timer.schedule(records, now_ms)
        self.parked += len(scheduled)
        self._wake_if_sooner(scheduled, self._wake_at_ms)
        return scheduled

    def unpark(self, handle: str, now_ms: int | None = None) -> bool:
        """Take back a parked record (an ack): True only if it will never be delivered, as
        ``cancel``; counted in ``unparked``, not in ``cancelled``."""
        self._check_open()
        taken = self.timer.cancel(handle, self.clock.now_ms() if now_ms is None else now_ms)
        self.unparked += bool(taken)
        return taken

    def _put_routed(self, routes: list, now_ms: int) -> list[SendResult]:
        """Messages stored at once or on a delay level (validated and routed): one group
        commit of the CommitLog."""
        if self.levels is None and any(r.kind == "level" for r in routes):
            raise EngineNotAvailableError("delay levels are not available in this build")
        if len(routes) == 1:  # a single send: no list of messages, no zip over the results
            return [self._put_result(routes[0], self.messages.put_message(routes[0].message),
                                     now_ms)]
        return [self._put_result(r, put, now_ms) for r, put in
                zip(routes, self.messages.put_messages([r.message for r in routes]))]

    def _put_result(self, r, put, now_ms: int) -> SendResult:
        """The send result of route ``r`` stored as ``put`` (counted in ``sent``)."""
        kind, props = r.kind, r.message.properties
        due = put.store_ms + (r.due_ms - now_ms) if kind == "level" else put.store_ms
        self.sent[kind] += 1
        return _new_send_result((put.msg_id, None, due,
                                 props.get("REAL_TOPIC", r.message.topic),
                                 int(props.get("REAL_QID", put.queue_id)), kind))

    # -- timer queries ------------------------------------------------------------------------
    def scan(self, from_ms: int | None = None, to_ms: int | None = None, topic: str | None = None,
             limit: int = 100, after: str | None = None) -> ScanPage:
        """Pending timer messages in due order; ``after`` resumes from a page's ``next_after``."""
        self._check_open()
        if limit < 0:
            raise ValueError(f"limit={limit} must be >= 0")
        return self.timer.scan(from_ms=from_ms, to_ms=to_ms, topic=topic, limit=limit, after=after)

    def cancel(self, handle: str) -> bool:
        """True only if the message will never be delivered (see the engine's promise)."""
        self._check_open()
        cancelled = self.timer.cancel(handle, self.clock.now_ms())
        self.cancelled += bool(cancelled)
        return cancelled

    def pull(self, topic: str, queue_id: int = 0, offset: int = 0, max_messages: int = 32
             ) -> list[Message]:
        """Delivered messages of ``topic``/``queue_id`` from ``offset`` (empty if none yet)."""
        self._check_open()
        return self.messages.pull(topic, queue_id, offset, max_messages)

    def pull_batch(self, topic: str, queue_id: int = 0, offset: int = 0,
                   max_messages: int = 4096, max_bytes: int = 64 << 20, what: str = "pull"
                   ) -> PulledBatch:
        """The fast read for a Python consumer: a page of ``topic``/``queue_id`` from
        ``offset`` read into one buffer (``rocks_timer.consume_read``). Nothing per message is
        built until asked: ``batch.bodies()``, ``batch[i].body`` / ``.msg_id`` / ...,
        ``batch.messages()``; go on from ``batch.next_offset``. At most ``max_messages``,
        cut where the records pass ``max_bytes`` (at least one). ``what`` names the reader
        in the log of an unreadable entry; only "pull" reads count as messages read (pops
        are counted by the pop service)."""
        self._check_open()
        return self.messages.read_batch(topic, queue_id, offset, max_messages, max_bytes, what)

    def pull_page(self, topic: str, queue_id: int = 0, offset: int = 0, max_messages: int = 32
                  ) -> tuple[list[Message], int]:
        """``pull`` and the queue offset to pull from next (past every entry looked at,
        unreadable ones included), for consumers that keep their own position."""
        self._check_open()
        return self.messages.pull_page(topic, queue_id, offset, max_messages)

    def queue_ranges(self) -> dict[tuple[str, int], tuple[int, int]]:
        """Every ConsumeQueue as (topic, queue_id) -> (min_offset, max_offset)."""
        return {(cq.topic, cq.queue_id): (cq.min_offset, cq.max_offset)
                for cq in self.messages.queues.all()}

    def max_offset(self, topic: str, queue_id: int = 0) -> int:
        cq = self.messages.consume_queue(topic, queue_id)
        return cq.max_offset if cq else 0

    def min_offset(self, topic: str, queue_id: int = 0) -> int:
        """The first queue offset still readable (retention moves it up)."""
        cq = self.messages.consume_queue(topic, queue_id)
        return cq.min_offset if cq else 0

    def message_at(self, commitlog_offset: int, size: int | None = None) -> Message:
        """The stored message at ``commitlog_offset`` (``size``: its record's size, when
        known): KeyError outside the log, CorruptRecordError where no whole record starts
        there."""
        self._check_open()
        return self.messages.get_message(commitlog_offset, size)

    def watch_arrivals(self, callback) -> None:
        """Call ``callback(topics)`` whenever messages land on ``topics`` (long polling wakes on
        it). It runs on the CommitLog's writing thread: keep it quick, never block."""
        self.messages.arrival_listeners.append(callback)

    def unwatch_arrivals(self, callback) -> None:
        try:
            self.messages.arrival_listeners.remove(callback)
        except ValueError:
            pass

    def topics(self) -> set[str]:
        """Every topic with a ConsumeQueue (the topics messages were stored on)."""
        return {cq.topic for cq in self.messages.queues.all()}

    # -- services -----------------------------------------------------------------------------
    def tick(self, now_ms: int | None = None) -> int:
        """One synchronous step of every service at ``now_ms`` (default: the clock's time).
        Returns how many messages reached their real topic.

        A step always runs at the time of the clock that stamps stored messages: a
        ``ManualClock`` behind ``now_ms`` is moved forward to it; otherwise ``now_ms`` is
        ignored (a real clock caps it at its own time, so a delivered copy's ``store_ms`` is
        never before its due time; a ``now_ms`` behind the clock would make the level service
        take due times ahead of it for a clock jump and deliver them early)."""
        self._check_open()
        now = self.clock.now_ms()
        if now_ms is not None and now_ms > now and isinstance(self.clock, ManualClock):
            now = self.clock.set(now_ms)
        with self._tick_lock:
            delivered = self._timer_step(now)
            if self.levels is not None:
                delivered += self.levels.tick(now)
            self._housekeeping(now)
        return delivered

    def _timer_step(self, now_ms: int, wait: bool = True) -> int:
        self.timer.maintain(now_ms)
        return self.deliverer.step(now_ms, wait_for_puts=wait)

    def _housekeeping(self, now_ms: int) -> None:
        if (self._async_flush and self._flusher is None  # started: _flush_loop flushes
                and now_ms - self._last_flush_ms >= self.config.flush_interval_ms):
            self._last_flush_ms = now_ms
            self.flush()
        if now_ms - self._last_retention_ms >= _RETENTION_EVERY_MS:
            self._last_retention_ms = now_ms
            self.messages.delete_expired(now_ms)

    def flush(self) -> None:
        """Make everything acknowledged so far survive power loss: the CommitLog, then the
        timer engine's files (value segments and RocksDB WAL, or the wheel's TimerLog, wheel
        and checkpoint). Runs every ``flush_interval_ms`` in async mode; in sync mode every
        write is on disk when it returns already."""
        self._check_open()
        self.messages.sync()
        self.timer.sync()

    def start(self) -> "Broker":
        """Run the services on background threads (the timer loop every timer_precision_ms)."""
        self._check_open()
        if self._threads:
            return self
        self._stopping.clear()
        self._threads = [threading.Thread(target=self._timer_loop, name="timer-deliverer",
                                          daemon=True)]
        if self._async_flush:
            self._flusher = threading.Thread(target=self._flush_loop, name="broker-flush",
                                             daemon=True)
            self._threads.append(self._flusher)
        for thread in self._threads:
            thread.start()
        if self.levels is not None:
            self.levels.start()
        return self

    def _timer_loop(self) -> None:
        """Step, then sleep until the next due time (at most one precision interval); a send
        due sooner than the planned wake-up wakes the loop early. A step that fails (a
        damaged store, a full disk) is retried after a backoff that doubles while it keeps
        failing (``self.health`` logs it and ``stats()`` shows it); sends do not cut it short."""
        interval_ms = self.config.timer_precision_ms
        gather_s = interval_ms / _GATHER_DIVISOR / 1000
        next_step_at = 0.0
        while not self._stopping.is_set():
            pause = next_step_at - time.monotonic()
            if pause > 0 and self._stopping.wait(pause):
                break
            self._wake.clear()
            try:
                started = time.monotonic()
                now = self.clock.now_ms()
                with self._tick_lock:
                    claimed_before = self.deliverer.in_flight
                    busy = self._timer_step(now, wait=False)
                    self._housekeeping(now)
                    claimed = self.deliverer.in_flight + busy - claimed_before
                # a trickle (messages falling due while producers send): let them gather
                # before the next step, so each step's fixed cost and GIL time are shared
                next_step_at = started + gather_s if claimed < _GATHER_BELOW else 0.0
                self.health.recovered(TIMER_STEP)
                if self.deliverer.in_flight:
                    if claimed == 0 or self.deliverer.in_flight >= self.config.timer_max_in_flight:
                        self.deliverer.wait_oldest(interval_ms / 1000)
                    continue  # pipelined: claim the next batch while this one is written
                now = self.clock.now_ms()
                sleep_ms = wake_in_ms(now, self.timer.next_due_ms(), interval_ms)
                self._wake_at_ms = now + sleep_ms
            except Exception as exc:  # noqa: BLE001 - a service loop never dies: it backs off
                sleep_ms = self.health.failed(TIMER_STEP, exc, interval_ms)
                self._wake_at_ms = 0
            if sleep_ms > 0:
                self._wake.wait(sleep_ms / 1000)

    def _flush_loop(self) -> None:
        """Async mode: flush every ``flush_interval_ms`` on a thread of its own, so the timer
        loop never waits for the disk to take what producers sent (a flush after a burst of
        sends stalled the first deliveries; docs/BENCHMARKS.md)."""
        interval_ms = self.config.flush_interval_ms
        wait_ms = interval_ms
        while not self._stopping.wait(wait_ms / 1000):
            try:
                self.flush()
            except Exception as exc:  # noqa: BLE001 - a service loop never dies: it backs off
                wait_ms = max(interval_ms, self.health.failed(PERIODIC_FLUSH, exc, interval_ms))
            else:
                self.health.recovered(PERIODIC_FLUSH)
                wait_ms = interval_ms

    def stop(self) -> None:
        """Stop the background services (pending messages stay stored)."""
        self._stopping.set()
        self._wake.set()
        for thread in self._threads:
            thread.join()
        self._threads = []
        self._flusher = None
        if self.levels is not None:
            self.levels.stop()

    def close(self) -> None:
        if self._closed:
            return
        self.stop()
        self._closed = True
        try:
            if self.levels is not None:
                self.levels.close()
            self.timer.close()
            self.messages.close()
            clean = True
        except BaseException:
            clean = False
            raise
        finally:
            self._release(clean)

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- stats --------------------------------------------------------------------------------
    def compact(self) -> dict[str, Any]:
        """Manual compaction of the timer store (``rtimer compact``) where the engine has one
        (``Compacting``), then, with value segments, their relocation; ``compacted`` False
        where it has none."""
        self._check_open()
        timer = self.timer
        if not isinstance(timer, Compacting):
            return {"engine": timer.name, "profile": None, "compacted": False}
        result = {"engine": timer.name, "profile": timer.profile, "compacted": True,
                  **timer.compact()}
        relocated = timer.relocate(self.clock.now_ms())  # {} without value segments
        if relocated:
            result["layout"] = "vlog"
            result["vlog"] = relocated  # sparse segments moved, empty ones released
        return result

    def check(self) -> CheckReport:
        """A read-only walk of the invariants (``rocks_timer.check``); ``.ok``, ``.problems``."""
        self._check_open()
        with self._tick_lock:
            return check_broker(self)

    # -- damage: set-aside messages and CommitLog loss (ARCHITECTURE §9) -----------------------
    def set_aside(self) -> list[SetAsideMessage]:
        """Every set-aside (quarantined) timer message, named by msg_id, topic, keys (when its
        value decodes), due time and reason; never delivered until restored. Engines without
        a quarantine have none."""
        self._check_open()
        return [row.info for row in self.timer.set_aside()]

    def export_set_aside(self, directory: Path | str, msg_ids: Sequence[str] | None = None
                         ) -> dict[str, Any]:
        """Write what is readable of the set-aside messages (all, or ``msg_ids``) into a new or
        empty ``directory``: raw bytes per message and a ``manifest.json``. Changes nothing."""
        self._check_open()
        rows = setaside.select(self.timer.set_aside(), msg_ids)
        return setaside.export(rows, Path(directory))

    def restore_set_aside(self, msg_ids: Sequence[str] | None = None) -> dict[str, Any]:
        """Put back the set-aside messages (all, or ``msg_ids``) whose value decodes now (the
        cause fixed, for instance a value segment restored from a copy); the others are
        refused with the reason. A restored message is delivered like any pending one (at
        once if its due time has passed)."""
        self._check_open()
        with self._tick_lock:  # no claim runs meanwhile
            result = self.timer.restore_set_aside(list(msg_ids) if msg_ids else None,
                                                  self.clock.now_ms())
        if result["restored"]:
            self._wake.set()
        return result

    def lost(self) -> LossRecord:
        """CommitLog loss recorded so far: the ranges gone and the messages named by the
        ConsumeQueue entries that pointed into them (``commitlog_loss``)."""
        self._check_open()
        return self.messages.loss.load()

    def accept_loss(self) -> LossRecord:
        """Record that an operator has seen every loss listed so far: ``check`` stops failing on
        it (it stays listed)."""
        self._check_open()
        return self.messages.loss.accept()

    def stats(self) -> dict[str, Any]:
        """Counters, lag and the engine's figures, and ``health``: ``healthy``, or
        ``degraded`` with each failure kind going on (where, error, count, since when). A
        figure the timer store cannot read (damage) is None and its error is in ``health``,
        so a damaged broker still answers."""
        self._check_open()
        now = self.clock.now_ms()
        timer = self._figure("stats: timer figures", lambda: self.timer.stats().as_dict())
        first = self._figure("stats: timer scan", lambda: self.timer.scan(limit=1))
        lag_ms = None if first is None else max(0, now - first[0].deliver_at_ms) if first else 0
        due = self._figure("stats: due counters", self.due_histogram)
        log_stats = self.messages.stats()
        return {
            "engine": self.timer.name,
            "health": self.health.as_dict(),
            "now_ms": now,
            "pending": timer["pending"] if timer is not None else self._pending_or_none(),
            "sent": dict(self.sent),
            "delivered": self.deliverer.delivered,
            "cancelled": self.cancelled,
            "parked": self.parked,
            "unparked": self.unparked,
            "rescheduled": self.rescheduled,
            "in_flight": self.deliverer.in_flight,
            "failed_puts": self.deliverer.failed_puts,
            "lag_ms": lag_ms,
            "timer": timer if timer is not None else {"bytes_written": {}},
            "due": due,
            "commitlog": log_stats,
            "levels": self.levels.stats() if self.levels is not None else None,
            "clamped_consumer_offsets": list(self.clamped_offsets),
            "deliveries": self.deliverer.tally.as_dict(),
            "send_delays_ms": self.delays.as_dict(),
            "open": {"open_ms": self.open_ms, "previous_stop_clean": self.previous_stop_clean},
            # damage an operator must look at (rtimer set-aside list, rtimer lost list)
            "set_aside": (timer or {}).get("corrupt", 0),
            "lost_messages": log_stats["lost"].get("lost_messages", 0),
            "lost_unaccepted": log_stats["lost"].get("unaccepted", 0),
        }

    @property
    def engine(self) -> str:
        """The timer engine's name (``memory``, ``rocksdb``, ``wheel``)."""
        return self.timer.name

    @property
    def delivered(self) -> int:
        """Timer messages delivered to their topic since the open."""
        return self.deliverer.delivered

    def pending_count(self) -> int:
        """Pending timer messages (the engine's counter: no scan)."""
        self._check_open()
        return self.timer.pending_count()

    def pending_by_topic(self, max_entries: int = 100_000) -> tuple[dict[str, int], bool]:
        """Pending timer messages per topic, and whether the count is complete: pending entries
        walked in due order (keys only where the engine can), at most ``max_entries`` (False
        and a partial count past that)."""
        self._check_open()
        return self.timer.count_by_topic(max_entries)

    def due_snapshot(self, bounds_s: tuple[int, ...]) -> dict[int | None, int]:
        """Pending counts by due bound from now (RocketMQ's timer message snapshot, without
        its 24 h cap): key b counts due times in [previous bound, b) seconds from now rounded up
        to the whole second, the first from the past; key None the rest."""
        self._check_open()
        return bound_counts(self.timer, self.clock.now_ms(), bounds_s)

    def _figure(self, where: str, read: Any) -> Any:
        """``read()``, or None when the timer store cannot answer it (the error goes to
        ``health``, quietly: ``stats()`` reports it)."""
        try:
            value = read()
        except RocksTimerError as exc:
            self.health.failed(where, exc, quiet=True)
            return None
        self.health.recovered(where)
        return value

    def _pending_or_none(self) -> int | None:
        try:
            return self.timer.pending_count()
        except RocksTimerError:
            return None


__all__ = ["Broker", "SendResult"]
