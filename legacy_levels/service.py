"""``ScheduleMessageService``: the 4.x 18-level delay service (with the 4.9.3 async delivery).

Messages sent with a delay level are parked by the broker in ``SCHEDULE_TOPIC_XXXX`` queue
``level - 1``; this service moves each one to its real topic once due. Two ways to run it:

- ``tick(now_ms)``: one synchronous pass over every level (tests, simulated time). In async mode
  the pass issues puts, waits for them (bounded), and commits their results in order.
- ``start()``: one scanner per level on a thread pool, re-polling every 100 ms of real time when
  idle, as 4.9.3 does; ``stop()`` ends the threads and persists the offsets.

Offsets (next ConsumeQueue offset per level) live in ``<root>/config/delayOffset.json``, written
crash-safely every ``flush_delay_offset_interval_ms`` of clock time and on stop. Delivery is
at-least-once: after a crash the offsets may trail the deliveries by up to one interval.

Differences from RocketMQ worth knowing:

- async mode never commits an offset past a pending put (4.9.3 writes the not-yet-due head's
  offset into the table even while earlier puts are in flight, which can lose them on a crash);
- the async resend backoff waits on the injected clock instead of sleeping the handler thread;
- a corrupt or unreadable offset file is kept as ``*.corrupt``, not deleted.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from pathlib import Path

from rocks_timer.config import BrokerConfig
from rocks_timer.health import Health, level_scan
from rocks_timer.message import SCHEDULE_TOPIC

from legacy_levels.async_deliver import PendingQueue
from legacy_levels.level import LevelScanner
from legacy_levels.offsets import DelayOffsetFile, DelayOffsetTable

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.1          # scanner re-poll when idle (4.9.3 DELAY_FOR_A_WHILE)
RESULT_INTERVAL_S = 0.01       # async result handling cadence (HandlePutResultTask)
ERROR_RETRY_S = 10.0           # after an unexpected exception (DELAY_FOR_A_PERIOD)
TICK_PUT_WAIT_S = 10.0         # how long tick() waits for the puts it issued
STOP_DRAIN_S = 5.0             # how long stop() waits for in-flight async puts
DEFAULT_LEVEL_BUDGET = 4_096   # CQ units a level looks at per pass


class ScheduleMessageService:
    """Owns the per-level scanners, the offset table and its file, and the scanner threads.

    It does not own the message store (the broker opens and closes it).
    """

    def __init__(self, root: Path, message_store, config: BrokerConfig, clock, *,
                 level_budget: int = DEFAULT_LEVEL_BUDGET, health: Health | None = None):
        self.root = Path(root)
        # the broker's (stats and `rtimer run`'s exit status show a scanner that keeps failing)
        self.health = health or Health(clock, config.failure_log_interval_ms,
                                       config.service_retry_max_backoff_ms)
        self.store = message_store
        self.config = config
        self.clock = clock
        self.levels = config.delay_levels
        self.level_budget = level_budget
        self.async_deliver = config.enable_schedule_async_deliver
        self.offsets = DelayOffsetTable(clock.now_ms)
        self.offset_file = DelayOffsetFile(self.root)
        self.scanners: dict[int, LevelScanner] = {}
        for level in self.levels.levels():
            pending = (PendingQueue(level, config.schedule_async_deliver_max_resend_num2_blocked)
                       if self.async_deliver else None)
            self.scanners[level] = LevelScanner(
                level, self.levels.delay_ms(level), message_store, self.offsets, pending,
                max_pending=config.schedule_async_deliver_max_pending_limit)
        self.offset_file_source = "unloaded"
        self.offset_file_problems: tuple[str, ...] = ()
        self.persists = 0
        self.persist_failures = 0
        self._loaded = False
        self._last_persist_ms = clock.now_ms()
        self._stop_event = threading.Event()
        self._executor: ThreadPoolExecutor | None = None
        self._persist_lock = threading.Lock()
        self._closed = False

    # -- offsets ---------------------------------------------------------------------------
    def load(self) -> None:
        """Read delayOffset.json (or its .bak) and clamp each level into its queue's range."""
        result = self.offset_file.load()
        if any(not p.endswith("missing") for p in result.problems):
            log.warning("delay offsets loaded from %s: %s", result.source, "; ".join(result.problems))
        self.offsets.merge(result.offsets, result.version)
        self.offset_file_source = result.source
        self.offset_file_problems = result.problems
        for level, scanner in self.scanners.items():
            cq = self.store.consume_queue(SCHEDULE_TOPIC, level - 1)
            if cq is not None:
                self.offsets.clamp(level, cq.min_offset, cq.max_offset)
            else:  # no queue: the store rebuilt nothing for this level, so it starts empty
                self.offsets.clamp(level, 0, 0)
            with scanner.lock:
                if scanner.pending is None or not scanner.pending.records:
                    scanner.read_offset = self.offsets.get(level, 0)
        self._last_persist_ms = self.clock.now_ms()
        self._loaded = True

    def persist(self) -> None:
        with self._persist_lock:
            text = self.offsets.encode()
            # the offsets forget the messages before them: their delivered copies go to disk
            # first (ARCHITECTURE §4), so a power cut can repeat a delivery but never lose one
            self.store.sync()
            self.offset_file.write(text)
            self.persists += 1

    def _persist_if_due(self, now_ms: int) -> None:
        if now_ms - self._last_persist_ms < self.config.flush_delay_offset_interval_ms:
            return
        self._last_persist_ms = now_ms
        try:
            self.persist()
        except OSError as exc:  # delivery goes on; the next interval tries again
            self.persist_failures += 1
            log.error("persisting delay offsets failed: %s", exc)

    # -- synchronous driving ---------------------------------------------------------------
    def tick(self, now_ms: int | None = None) -> int:
        """One pass over every level at ``now_ms``; returns how many messages were delivered.
        A ``now_ms`` behind the service's clock is raised to it: the clock-jump rule (a due
        time more than a level ahead of now is delivered at once) is for the clock stepping
        back, not for a caller's stale time, which would otherwise deliver early."""
        if not self._loaded:
            self.load()
        clock_ms = self.clock.now_ms()
        now_ms = clock_ms if now_ms is None else max(now_ms, clock_ms)
        delivered = 0
        for scanner in self.scanners.values():
            issued = scanner.scan(now_ms, self.level_budget)
            if not self.async_deliver:
                delivered += issued
        if self.async_deliver:
            futures = [f for s in self.scanners.values() for f in s.running_futures()]
            if futures:
                wait_futures(futures, timeout=TICK_PUT_WAIT_S)
            for scanner in self.scanners.values():
                delivered += scanner.handle_results(now_ms)
        self._persist_if_due(now_ms)
        return delivered

    # -- threads ---------------------------------------------------------------------------
    def start(self) -> None:
        """One scanner thread per level plus a housekeeping thread (persist every interval)."""
        if self._executor is not None:
            return
        if not self._loaded:
            self.load()
        self._stop_event.clear()
        self._executor = ThreadPoolExecutor(max_workers=len(self.scanners) + 1,
                                            thread_name_prefix="schedule-level")
        for scanner in self.scanners.values():
            self._executor.submit(self._run_level, scanner)
        self._executor.submit(self._run_housekeeping)

    @property
    def running(self) -> bool:
        return self._executor is not None

    def _run_level(self, scanner: LevelScanner) -> None:
        stop = self._stop_event
        while not stop.is_set():
            try:
                now_ms = self.clock.now_ms()
                moved = scanner.scan(now_ms, self.level_budget)
                committed = scanner.handle_results(now_ms)
            except Exception as exc:  # noqa: BLE001 - counted; the level retries later like 4.x
                scanner.counters.errors += 1
                # logged once, then one line per interval; the wait is 4.x's DELAY_FOR_A_PERIOD
                self.health.failed(level_scan(scanner.level), exc, int(ERROR_RETRY_S * 1000))
                stop.wait(ERROR_RETRY_S)
                continue
            self.health.recovered(level_scan(scanner.level))
            if moved or committed:
                continue
            futures = scanner.running_futures()
            if futures:
                wait_futures(futures[:1], timeout=RESULT_INTERVAL_S)
            else:
                stop.wait(POLL_INTERVAL_S)

    def _run_housekeeping(self) -> None:
        while not self._stop_event.wait(POLL_INTERVAL_S):
            self._persist_if_due(self.clock.now_ms())

    def stop(self) -> None:
        """Stop the threads, let in-flight async puts settle (bounded), persist the offsets."""
        executor, self._executor = self._executor, None
        if executor is not None:
            self._stop_event.set()
            executor.shutdown(wait=True)
        if self.async_deliver:
            futures = [f for s in self.scanners.values() for f in s.running_futures()]
            if futures:
                wait_futures(futures, timeout=STOP_DRAIN_S)
            now_ms = self.clock.now_ms()
            for scanner in self.scanners.values():
                scanner.handle_results(now_ms, stopped=True)
        if self._loaded:
            self.persist()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.stop()

    def __enter__(self) -> "ScheduleMessageService":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- observation -----------------------------------------------------------------------
    def stats(self) -> dict:
        out: dict = {}
        totals = {"delivered": 0, "skipped": 0, "dropped_half": 0, "put_failures": 0,
                  "resends": 0, "refused_flow": 0, "refused_blocked": 0, "errors": 0}
        per_level: dict[int, dict] = {}
        pending: dict[int, int] = {}
        for level, scanner in self.scanners.items():
            cq = self.store.consume_queue(SCHEDULE_TOPIC, level - 1)
            cq_max = cq.max_offset if cq is not None else 0
            offset = self.offsets.get(level, 0)
            out[f"scheduleMessageOffset_{level}"] = f"{offset},{cq_max}"
            counters = scanner.counters.as_dict()
            for name in totals:
                totals[name] += counters[name]
            pending[level] = len(scanner.pending) if scanner.pending is not None else 0
            per_level[level] = {"offset": offset, "cq_max": cq_max, "lag": max(0, cq_max - offset),
                                "pending": pending[level], **counters}
        out.update(totals)
        out.update({
            "mode": "async" if self.async_deliver else "sync",
            "running": self.running,
            "pending": pending,
            "levels": per_level,
            "data_version": self.offsets.data_version.to_json(),
            "offset_file": self.offset_file_source,
            "persists": self.persists,
            "persist_failures": self.persist_failures,
        })
        return out

    def offset(self, level: int) -> int:
        """The level's committed offset (next CQ unit it will deliver)."""
        return self.offsets.get(level, 0)
