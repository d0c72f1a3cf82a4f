"""The wheel's flow control (RocketMQ's isReject, timerCongestNumEachSlot)."""
from __future__ import annotations

import random

import pytest

from rocks_timer import Broker, BrokerConfig, ManualClock, Message, TimerFlowControlError
from rocks_timer.message_store import MessageStore
from rocks_timer.timer.store import TimerRecord
from rocks_timer.timer.wheel import WheelTimerStore
from rocks_timer.timer.wheel.engine import refuses

START_MS = 1_700_000_000_000


def open_wheel(tmp_path, n: int, seed: int = 1):
    config = BrokerConfig(timer_engine="wheel", timer_congest_num_each_slot=n).validate()
    clock = ManualClock(START_MS)
    store = MessageStore.open(tmp_path / "store", config, clock)
    wheel = WheelTimerStore.open(tmp_path / "wheel", store, config, clock=clock,
                                 rng=random.Random(seed))
    return store, wheel


def records(n: int, due_ms: int) -> list[TimerRecord]:
    return [TimerRecord(due_ms, Message("t", b"x", msg_id=f"{i:032X}")) for i in range(n)]


@pytest.mark.parametrize("c, n, draw, refused", [
    (10, 10, 999, False),   # c <= N accepts whatever the draw
    (20, 10, 0, True),      # c >= 2N refuses whatever the draw
    (11, 10, 999, True),    # just above N: refused unless the draw is <= 1000 * 1 / 10.1
    (11, 10, 99, False),
    (19, 10, 0, False),     # just below 2N: accepted unless the draw exceeds ~891
    (19, 10, 892, True),
])
def test_rocketmqs_curve(c, n, draw, refused):
    assert refuses(c, n, draw) is refused


def test_a_congested_slot_refuses_the_whole_batch(tmp_path):
    store, wheel = open_wheel(tmp_path, n=10)
    due = START_MS + 60_000
    wheel.schedule(records(10, due), START_MS)           # c = 0..9: all <= N
    wheel.maintain(START_MS)                              # enqueued: the slot holds 10
    before = store.max_offset
    with pytest.raises(TimerFlowControlError, match="under flow control.*holds 1[0-9] messages"):
        wheel.schedule(records(11, due), START_MS)        # c reaches 2N = 20 at the latest
    assert store.max_offset == before                     # nothing of the batch was stored
    other = wheel.schedule(records(5, due + 10_000), START_MS)  # another slot is not congested
    assert len(other) == 5
    store_close(store, wheel)


def test_between_n_and_2n_most_sends_are_refused_as_in_rocketmq(tmp_path):
    store, wheel = open_wheel(tmp_path, n=100)
    due = START_MS + 100_000
    wheel.schedule(records(100, due), START_MS)
    wheel.maintain(START_MS)
    accepted = 0
    for i in range(200):
        try:
            wheel.schedule([TimerRecord(due, Message("t", b"y", msg_id=f"{10**6 + i:032X}"))],
                           START_MS)
            accepted += 1
            wheel.maintain(START_MS)
        except TimerFlowControlError:
            pass
    congest = wheel.wheel.get_slot(wheel.timer_out_ms(due)).num
    assert 0 < accepted < 120 and congest < 200           # RocketMQ's test: OK count in (0, 120)
    store_close(store, wheel)


def test_flow_control_is_off_by_default(tmp_path):
    config = BrokerConfig(timer_engine="wheel")
    assert config.timer_congest_num_each_slot == 2**31 - 1
    with Broker.open(tmp_path, config, clock=ManualClock(START_MS)) as broker:
        broker.send_batch([Message("t", b"x") for _ in range(500)], deliver_at_ms=START_MS + 5000)
        broker.tick(START_MS)
        broker.send_batch([Message("t", b"x") for _ in range(500)], deliver_at_ms=START_MS + 5000)


def test_the_setting_loads_from_broker_conf(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("timerCongestNumEachSlot=50\n")
    assert BrokerConfig.from_broker_conf(conf).timer_congest_num_each_slot == 50


def store_close(store, wheel):
    wheel.close()
    store.close()
