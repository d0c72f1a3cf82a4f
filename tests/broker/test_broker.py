"""The Broker facade: lifecycle, locking, tick/start, stats."""
import subprocess
import sys
import time

import pytest

from rocks_timer import (Broker, BrokerConfig, ConfigError, InvalidHandleError, Message,
                         StoreClosedError, StoreLockedError)


def test_immediate_send_and_pull_survive_reopen(tmp_path, clock):
    with Broker.open(tmp_path, BrokerConfig(timer_engine="memory"), clock=clock) as broker:
        result = broker.send(Message("orders", b"hello", tags="TagA", keys=["k1"]))
        assert result.handle is None and result.deliver_at_ms == clock.now_ms()
    with Broker.open(tmp_path, BrokerConfig(timer_engine="memory"), clock=clock) as broker:
        [m] = broker.pull("orders", queue_id=0, offset=0, max_messages=32)
        assert (m.body, m.tags, m.keys, m.msg_id) == (b"hello", "TagA", ("k1",), result.msg_id)
        assert (m.queue_id, m.queue_offset, m.born_ms, m.store_ms) == (0, 0, clock.now_ms(),
                                                                      clock.now_ms())


def test_closed_broker_refuses_work(tmp_path, clock):
    broker = Broker.open(tmp_path, BrokerConfig(timer_engine="memory"), clock=clock)
    broker.close()
    broker.close()  # idempotent
    with pytest.raises(StoreClosedError):
        broker.send(Message("orders", b"x"))


def test_a_second_process_gets_a_clear_lock_error(tmp_path, clock):
    with Broker.open(tmp_path, BrokerConfig(timer_engine="memory"), clock=clock):
        code = ("import sys; from rocks_timer import Broker, BrokerConfig, StoreLockedError\n"
                "try:\n  Broker.open(sys.argv[1], BrokerConfig(timer_engine='memory'))\n"
                "except StoreLockedError as e:\n  print('LOCKED', e); sys.exit(3)\n")
        done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 3 and "in use by pid" in done.stdout
        with pytest.raises(StoreLockedError):
            Broker.open(tmp_path, BrokerConfig(timer_engine="memory"), clock=clock)


def test_engine_switch_on_existing_data_is_refused(tmp_path, clock):
    Broker.open(tmp_path, BrokerConfig(timer_engine="rocksdb"), clock=clock).close()
    with pytest.raises(ConfigError, match="created with timer_engine='rocksdb'"):
        Broker.open(tmp_path, BrokerConfig(timer_engine="wheel"), clock=clock)


def test_malformed_handle_raises(make_broker):
    broker = make_broker("memory")
    with pytest.raises(InvalidHandleError):
        broker.cancel("not-a-handle")


def test_start_delivers_in_the_background(tmp_path):
    config = BrokerConfig(timer_engine="memory", timer_precision_ms=20)
    with Broker.open(tmp_path, config) as broker:
        broker.start()
        sent = broker.send(Message("orders", b"soon"), delay_ms=150)
        deadline = time.monotonic() + 10
        while not broker.pull("orders") and time.monotonic() < deadline:
            time.sleep(0.02)
        [m] = broker.pull("orders")
        assert m.store_ms >= sent.deliver_at_ms  # never early
        broker.stop()
    assert broker.stats.__self__ is broker


def test_stats_shape(make_broker, clock):
    broker = make_broker("memory")
    broker.send(Message("orders", b"x"), delay_ms=10_000)
    broker.send(Message("orders", b"y"))
    clock.advance(20_000)
    stats = broker.stats()
    assert stats["pending"] == 1 and stats["lag_ms"] == 10_000
    assert stats["sent"] == {"immediate": 1, "level": 0, "timer": 1}
    broker.tick()
    stats = broker.stats()
    assert stats["pending"] == 0 and stats["delivered"] == 1 and stats["lag_ms"] == 0


def test_tick_with_an_explicit_time_never_stores_before_due(make_broker, clock):
    broker = make_broker("rocksdb")
    sent = broker.send(Message("orders", b"x"), delay_ms=5_000)
    broker.tick(clock.now_ms() + 5_000)  # the manual clock is moved forward with it
    [m] = broker.pull("orders")
    assert m.store_ms >= sent.deliver_at_ms and clock.now_ms() == sent.deliver_at_ms


def test_a_started_broker_flushes_on_a_thread_of_its_own(tmp_path, clock):
    """Async mode: ``start()`` runs the periodic flush on its own thread (the timer loop does
    not wait for the disk), and ``stop()`` ends it; ``tick()`` without ``start()`` flushes
    inline as before."""
    config = BrokerConfig(flush_interval_ms=50)
    with Broker.open(tmp_path, config, clock=clock) as broker:
        log = broker.messages.commitlog
        broker.start()
        try:
            names = {t.name for t in broker._threads}
            assert names == {"timer-deliverer", "broker-flush"}
            broker.send(Message("orders", b"x" * 100))  # clock never moves: only the thread
            deadline = time.monotonic() + 5
            while log._synced < log.max_offset and time.monotonic() < deadline:
                time.sleep(0.01)
            assert log._synced == log.max_offset
        finally:
            broker.stop()
        assert broker._threads == []
    with Broker.open(tmp_path, BrokerConfig(flush_disk_type="sync"), clock=clock) as broker:
        broker.start()
        assert [t.name for t in broker._threads] == ["timer-deliverer"]  # sync: nothing to do
        broker.stop()
