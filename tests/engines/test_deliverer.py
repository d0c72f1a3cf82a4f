"""The deliverer against injected CommitLog failures: retried with backoff, never dropped."""
from concurrent.futures import Future

import pytest

from rocks_timer import BrokerConfig, Message, PutFailedError
from rocks_timer.message_store import MessageStore
from rocks_timer.timer.deliverer import Deliverer
from rocks_timer.timer.rocksdb import RocksTimerStore
from rocks_timer.timer.store import TimerRecord


class FlakyStore:
    """The real MessageStore, except that the first ``failures`` batch puts fail."""

    def __init__(self, real: MessageStore, failures: int):
        self.real, self.failures, self.attempts_ms = real, failures, []

    def put_messages_async(self, messages):
        self.attempts_ms.append(self.real.clock.now_ms())
        if self.failures > 0:
            self.failures -= 1
            failed: Future = Future()
            failed.set_exception(PutFailedError("injected: disk busy"))
            return failed
        return self.real.put_messages_async(messages)

    def __getattr__(self, name):
        return getattr(self.real, name)


@pytest.fixture(params=["memory", "rocksdb"])
def timer_store(request, tmp_path):
    if request.param == "memory":
        from rocks_timer.timer.memory import MemoryTimerStore
        yield MemoryTimerStore()
        return
    store = RocksTimerStore.open(tmp_path / "rocks", BrokerConfig())
    yield store
    store.close()


def flaky_deliverer(path, clock, timer_store, failures: int, **config_changes):
    """A deliverer whose CommitLog fails its first ``failures`` batch puts."""
    config = BrokerConfig(**config_changes).validate()
    real = MessageStore.open(path, config, clock)
    flaky = FlakyStore(real, failures=failures)
    deliverer = Deliverer(timer_store, flaky, config, clock)
    deliverer.reconcile()
    return real, flaky, deliverer


def test_failed_puts_are_retried_with_backoff_and_never_dropped(tmp_path, clock, timer_store):
    real, flaky, deliverer = flaky_deliverer(tmp_path / "log", clock, timer_store, failures=4,
                                             timer_deliver_batch=10)
    now = clock.now_ms()
    timer_store.schedule([TimerRecord(now + 100, Message("t", str(i).encode(),
                                                         msg_id=f"{i:032X}"))
                          for i in range(10)], now)
    clock.advance(100)
    assert deliverer.step(clock.now_ms()) == 0  # attempt 1 fails
    for wait_ms in (100, 200, 300):  # attempts 2..4 fail, each after a longer backoff
        clock.advance(wait_ms - 1)
        deliverer.step(clock.now_ms())
        assert len(flaky.attempts_ms) == 1 + (wait_ms // 100) - 1
        clock.advance(1)
        assert deliverer.step(clock.now_ms()) == 0
    assert deliverer.in_flight == 10 and real.pull("t", 0, 0, 100) == []
    assert timer_store.pending_count() == 10  # nothing was dropped
    late = timer_store.schedule([TimerRecord(now - 1000, Message("t", b"later",
                                                                msg_id=f"{99:032X}"))], now)
    assert late[0].key_due_ms > now + 100  # clamped ahead of the claimed keys, never behind
    clock.advance(400)
    while deliverer.step(clock.now_ms()):
        pass
    got = [m.body for m in real.pull("t", 0, 0, 100)]
    assert sorted(got) == sorted([str(i).encode() for i in range(10)] + [b"later"])
    gaps = [b - a for a, b in zip(flaky.attempts_ms, flaky.attempts_ms[1:5])]
    assert gaps == [100, 200, 300, 400]
    assert deliverer.failed_puts == 4 and timer_store.pending_count() == 0
    real.close()


def test_backoff_is_capped(tmp_path, clock, timer_store):
    real, flaky, deliverer = flaky_deliverer(tmp_path / "log", clock, timer_store, failures=6,
                                             timer_put_retry_max_backoff_ms=250)
    now = clock.now_ms()
    timer_store.schedule([TimerRecord(now, Message("t", b"x", msg_id=f"{1:032X}"))], now)
    for _ in range(40):
        deliverer.step(clock.now_ms())
        clock.advance(50)
    gaps = [b - a for a, b in zip(flaky.attempts_ms, flaky.attempts_ms[1:])]
    assert gaps[:2] == [100, 200] and set(gaps[2:6]) == {250}
    assert [m.body for m in real.pull("t", 0, 0, 10)] == [b"x"]
    real.close()
