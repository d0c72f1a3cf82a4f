"""Async delivery: pending queues, in-order commits, flow control, resends (behaviours 26-31)."""
from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from legacy_levels.async_deliver import (PendingQueue, PutResultProcess, PutStatus,
                                         resend_backoff_ms)
from legacy_levels.service import ScheduleMessageService
from tests.support.levels_support import T0_MS, FailingStore, open_store, park, pull_all
from rocks_timer.clock import ManualClock
from rocks_timer.errors import PutFailedError


def record(offset, status=PutStatus.RUNNING, future=None, resend_count=0):
    return PutResultProcess(1, offset, offset * 100, 100, None, future, status, resend_count)


def done_future(ok=True):
    future = Future()
    if ok:
        future.set_result("ok")
    else:
        future.set_exception(PutFailedError("failed"))
    return future


def no_resend(_record):
    raise AssertionError("no resend expected")


# -- the pending queue on its own -------------------------------------------------------------
def test_resend_backoff_steps_and_cap():
    assert [resend_backoff_ms(k) for k in (1, 2, 5, 600, 700)] == [100, 200, 500, 60_000, 60_000]


def test_commits_in_order_behind_a_running_record():
    running = Future()
    queue = PendingQueue(1)
    for r in (record(5, future=done_future()), record(6, future=running),
              record(7, future=done_future())):
        queue.append(r)
    out = queue.handle(0, no_resend)
    assert out.committed == 1 and out.committed_offset == 6 and len(queue) == 2
    assert queue.handle(0, no_resend).committed_offset is None  # 7 succeeded, 6 holds it back
    running.set_result("ok")
    out = queue.handle(0, no_resend)
    assert out.committed == 2 and out.committed_offset == 8 and len(queue) == 0


def test_skip_head_pops_without_moving_the_offset():
    queue = PendingQueue(1)
    queue.append(record(3, PutStatus.SKIP))
    queue.append(record(4, future=Future()))
    out = queue.handle(0, no_resend)
    assert out.skipped == 1 and out.committed_offset is None and len(queue) == 1


def test_head_blocks_only_above_the_resend_limit():
    queue = PendingQueue(1, max_resend_blocked=3)
    queue.append(record(0, PutStatus.EXCEPTION, resend_count=3))
    assert not queue.head_blocks()
    queue.records[0].resend_count = 4
    assert queue.head_blocks()


def test_failed_head_resends_after_backoff_on_the_clock():
    issued = []

    def resend(r):
        issued.append(r.queue_offset)
        return done_future(ok=len(issued) >= 3)

    queue = PendingQueue(1)
    queue.append(record(0, future=done_future(ok=False)))
    now = 1_000
    assert queue.handle(now, resend).failures == 1 and issued == []  # waits 100 ms
    assert queue.handle(now + 99, resend).resends == 0
    queue.handle(now + 100, resend)          # resend 1 fails at once: resend 2 is scheduled
    assert issued == [0] and queue.records[0].resend_count == 2
    assert queue.records[0].resend_due_ms == now + 100 + 200
    queue.handle(now + 299, resend)
    assert issued == [0]
    queue.handle(now + 300, resend)          # resend 2 fails: resend 3 after 300 ms
    assert issued == [0, 0] and queue.records[0].resend_due_ms == now + 600
    out = queue.handle(now + 600, resend)    # resend 3 succeeds
    assert issued == [0, 0, 0]
    assert out.committed == 1 and out.committed_offset == 1 and len(queue) == 0


def test_unreadable_head_is_skipped_only_after_six_resends():
    queue = PendingQueue(1, max_resend_blocked=3)
    queue.append(record(0, future=done_future(ok=False)))
    now = 0
    for _ in range(200):
        head = queue.records[0] if queue.records else None
        if head is None:
            break
        if head.resend_count <= 6:
            assert head.status in (PutStatus.EXCEPTION, PutStatus.RUNNING)
        queue.handle(now, lambda r: None)  # the message cannot be read
        now += 100
    assert len(queue) == 0
    # skipped when resend 7 found it unreadable: waits 100+200+...+700 ms in all
    assert now >= sum(range(100, 800, 100))


def test_stopped_service_does_not_resend():
    queue = PendingQueue(1)
    queue.append(record(0, future=done_future(ok=False)))
    out = queue.handle(10_000, no_resend, stopped=True)
    assert out.resends == 0 and queue.records[0].status is PutStatus.EXCEPTION


# -- with a real MessageStore -----------------------------------------------------------------
class GateStore:
    """Real store whose async puts land only when the test opens the gate."""

    def __init__(self, store):
        self._store = store
        self.held: list[tuple] = []
        self.open = False
        self._lock = threading.Lock()

    def put_message_async(self, msg):
        with self._lock:
            if self.open:
                return self._store.put_message_async(msg)
            outer = Future()
            self.held.append((msg, outer))
            return outer

    def release(self):
        with self._lock:
            self.open = True
            held, self.held = self.held, []
        for msg, outer in held:
            outer.set_result(self._store.put_message(msg))

    def __getattr__(self, name):
        return getattr(self._store, name)


def async_env(tmp_path, store_wrapper=None, **config):
    clock = ManualClock(T0_MS)
    real, cfg = open_store(tmp_path, clock, message_delay_level="1s 5s",
                           enable_schedule_async_deliver=True, **config)
    store = store_wrapper(real) if store_wrapper else real
    return clock, real, store, ScheduleMessageService(tmp_path, store, cfg, clock)


def test_async_delivers_in_order_and_commits(tmp_path):
    clock, real, store, service = async_env(tmp_path)
    try:
        for i in range(300):
            park(real, 1 + i % 2, f"t{1 + i % 2}", str(i).encode())
        clock.advance(5_000)
        assert service.tick() == 300
        assert service.offset(1) == 150 and service.offset(2) == 150
        assert [m.body for m in pull_all(real, "t1")] == [str(i).encode() for i in range(0, 300, 2)]
        assert service.stats()["pending"] == {1: 0, 2: 0}
    finally:
        service.close()
        real.close()


def test_flow_control_stops_issuing_above_the_pending_limit(tmp_path):
    clock, real, gate, service = async_env(tmp_path, GateStore)
    try:
        for i in range(2_100):
            real.put_message_async(park_message(i))
        real.put_message(park_message(2_100))
        clock.advance(1_000)
        service.load()
        service.scanners[1].scan(clock.now_ms(), 10_000)
        assert len(service.scanners[1].pending) == 2_001   # limit 2000 + 1, as RocketMQ
        assert len(gate.held) == 2_001
        assert service.stats()["refused_flow"] == 1
        assert service.offset(1) == 0                      # nothing committed yet
        gate.release()
        assert service.tick() == 2_001   # this pass: still full when scanned, then drained
        assert service.stats()["refused_flow"] == 2
        assert service.offset(1) == 2_001
        assert service.tick() == 100     # the next pass issues and commits the rest
        assert service.offset(1) == 2_101
        assert len(pull_all(real, "orders")) == 2_101
    finally:
        service.close()
        real.close()


def park_message(i):
    from rocks_timer.message import DELAY, REAL_QID, REAL_TOPIC, SCHEDULE_TOPIC, Message
    return Message(topic=SCHEDULE_TOPIC, body=str(i).encode(), queue_id=0,
                   properties={REAL_TOPIC: "orders", REAL_QID: "0", DELAY: "1"})


@pytest.mark.parametrize("mode", ["future", "raise"])
def test_async_failing_commitlog_loses_nothing(tmp_path, mode):
    clock, real, store, service = async_env(
        tmp_path, lambda s: FailingStore(s, fail_puts=12, mode=mode))
    try:
        for i in range(40):
            park(real, 1, "orders", str(i).encode())
        clock.advance(1_000)
        for _ in range(200):
            service.tick()
            assert service.offset(1) <= 40
            if service.offset(1) == 40 and not service.scanners[1].pending.records:
                break
            clock.advance(100)
        assert service.offset(1) == 40
        bodies = sorted(int(m.body) for m in pull_all(real, "orders"))
        assert bodies == list(range(40))                  # no loss, no duplicate
        stats = service.stats()
        assert stats["delivered"] == 40
        assert stats["put_failures"] == 12 and stats["resends"] == 12  # each failed put resent once
    finally:
        service.close()
        real.close()


def test_async_offsets_never_pass_a_pending_put(tmp_path):
    """A failed first put holds the offset at 0 even though later puts land."""
    clock, real, store, service = async_env(tmp_path, lambda s: FailingStore(s, fail_puts=1))
    try:
        for i in range(5):
            park(real, 1, "orders", str(i).encode())
        clock.advance(1_000)
        assert service.tick() == 0
        assert service.offset(1) == 0
        assert len(pull_all(real, "orders")) == 4          # 1..4 landed, 0 is waiting to resend
        clock.advance(100)
        service.tick()                                     # resend issued
        clock.advance(1)
        assert service.tick() == 5
        assert service.offset(1) == 5
        # landing order differs from FIFO here, as in RocketMQ's async mode
        assert sorted(m.body for m in pull_all(real, "orders")) == [str(i).encode()
                                                                   for i in range(5)]
    finally:
        service.close()
        real.close()


def test_blocked_level_issues_nothing_new(tmp_path):
    clock, real, store, service = async_env(tmp_path, lambda s: FailingStore(s, fail_puts=5))
    try:
        park(real, 1, "orders", b"0")
        clock.advance(1_000)
        service.tick()
        for k in range(1, 4):      # each failed resend schedules the next: resend count 4 > 3
            clock.advance(resend_backoff_ms(k))
            service.tick()
        scanner = service.scanners[1]
        assert scanner.pending.records[0].resend_count == 4 and scanner.pending.head_blocks()
        park(real, 1, "orders", b"1")
        issued_before = store.attempts
        service.scanners[1].scan(clock.now_ms() + 1_000, 100)   # "1" is due then
        assert store.attempts == issued_before and scanner.counters.refused_blocked == 1
        clock.advance(1_000)       # > 400 ms: resend 4 fails (5th failed put), resend 5 later
        service.tick()
        clock.advance(resend_backoff_ms(5))
        for _ in range(3):
            service.tick()
        assert service.offset(1) == 2
        assert [m.body for m in pull_all(real, "orders")] == [b"0", b"1"]
    finally:
        service.close()
        real.close()
