"""Every validation rule and routing rule of ARCHITECTURE §3, through Broker.send."""
import datetime as dt

import pytest

from rocks_timer import (DelayOutOfRangeError, InvalidMessageError, Message, RocksTimerError)
from rocks_timer.message import SCHEDULE_TOPIC


@pytest.fixture
def broker(make_broker):
    return make_broker("memory")


def nothing_stored(broker, topic="orders"):
    return broker.pull(topic) == [] and broker.scan() == [] and \
        broker.messages.max_offset == 0


@pytest.mark.parametrize("topic", ["", "a b", "x" * 128, "bad/slash", "ü", None])
def test_bad_topics_are_rejected(broker, topic):
    with pytest.raises(InvalidMessageError, match="topic"):
        broker.send(Message(topic, b"x"))
    assert nothing_stored(broker)


@pytest.mark.parametrize("topic", ["SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer", "rmq_sys_x"])
def test_system_topics_are_rejected(broker, topic):
    with pytest.raises(InvalidMessageError, match="system topic"):
        broker.send(Message(topic, b"x"))
    assert nothing_stored(broker)


@pytest.mark.parametrize("name", ["REAL_TOPIC", "REAL_QID", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS",
                                  "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY"])
def test_broker_owned_properties_are_rejected(broker, name):
    with pytest.raises(InvalidMessageError, match=name):
        broker.send(Message("orders", b"x", properties={name: "1"}))
    assert nothing_stored(broker)


def test_body_limit(make_broker):
    broker = make_broker("memory", max_message_size=1024)
    broker.send(Message("orders", b"x" * 1024))
    with pytest.raises(InvalidMessageError, match="1025 bytes exceeds max_message_size 1024"):
        broker.send(Message("orders", b"x" * 1025))
    assert len(broker.pull("orders")) == 1


def test_properties_limit_is_32767_bytes(broker):
    name = "k"
    ok = {name: "v" * (32_767 - len("k\x01\x02") - len("UNIQ_KEY\x01\x02") - 32)}
    broker.send(Message("orders", b"x", properties=ok))
    too_big = {name: "v" * 32_767}
    with pytest.raises(InvalidMessageError, match="32767"):
        broker.send(Message("orders", b"x", properties=too_big))
    assert len(broker.pull("orders")) == 1


@pytest.mark.parametrize("prop", ["TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "DELAY"])
@pytest.mark.parametrize("value", ["abc", "1.5", "", " "])
def test_non_integer_schedule_properties_are_rejected(broker, prop, value):
    with pytest.raises(InvalidMessageError, match=prop):
        broker.send(Message("orders", b"x", properties={prop: value}))
    assert nothing_stored(broker)


def test_two_schedule_arguments_are_rejected(broker, clock):
    with pytest.raises(InvalidMessageError, match="at most one"):
        broker.send(Message("orders", b"x"), delay_ms=1000, deliver_at_ms=clock.now_ms() + 5)
    with pytest.raises(InvalidMessageError, match="already carries"):
        broker.send(Message("orders", b"x", properties={"TIMER_DELAY_MS": "5"}), delay_ms=1000)
    assert nothing_stored(broker)


def test_naive_datetime_is_rejected(broker):
    with pytest.raises(InvalidMessageError, match="timezone-aware"):
        broker.send(Message("orders", b"x"), deliver_at=dt.datetime(2030, 1, 1))


def test_every_rejection_is_a_rocks_timer_error(broker):
    with pytest.raises(RocksTimerError):
        broker.send(Message("orders", b"x"), delay_ms="soon")


def test_due_now_or_past_is_stored_at_once(broker, clock):
    for when in (clock.now_ms(), clock.now_ms() - 1000):
        result = broker.send(Message("orders", b"x"), deliver_at_ms=when)
        assert result.handle is None and result.route == "immediate"
    pulled = broker.pull("orders")
    assert len(pulled) == 2 and pulled[1].properties["TIMER_DELIVER_MS"] == str(clock.now_ms() - 1000)


def test_max_delay_is_inclusive(make_broker, clock):
    broker = make_broker("memory", timer_max_delay_sec=60)
    ok = broker.send(Message("orders", b"x"), delay_ms=60_000)
    assert ok.handle is not None and ok.deliver_at_ms == clock.now_ms() + 60_000
    with pytest.raises(DelayOutOfRangeError, match="60001 ms ahead; the maximum is 60000 ms"):
        broker.send(Message("orders", b"x"), delay_ms=60_001)
    with pytest.raises(DelayOutOfRangeError):
        broker.send(Message("orders", b"x"), deliver_at_ms=clock.now_ms() + 80_000)
    assert len(broker.scan()) == 1


def test_precedence_sec_then_ms_then_deliver(broker, clock):
    now = clock.now_ms()
    r = broker.send(Message("orders", b"x", properties={"TIMER_DELAY_SEC": "3",
                                                         "TIMER_DELIVER_MS": str(now + 60_000)}))
    assert r.deliver_at_ms == now + 3000
    r = broker.send(Message("orders", b"x", properties={"TIMER_DELAY_MS": "1500",
                                                         "TIMER_DELIVER_MS": str(now + 60_000)}))
    assert r.deliver_at_ms == now + 1500


def test_level_wins_over_timer_properties_and_is_clamped(broker, clock):
    r = broker.send(Message("orders", b"x", properties={"DELAY": "99",
                                                         "TIMER_DELIVER_MS": str(clock.now_ms() + 5)}))
    assert r.route == "level" and r.handle is None
    assert r.deliver_at_ms == clock.now_ms() + 7_200_000
    parked = broker.pull(SCHEDULE_TOPIC, 17)
    assert len(parked) == 1
    props = parked[0].properties
    assert props["DELAY"] == "18" and props["REAL_TOPIC"] == "orders" and props["REAL_QID"] == "0"
    assert "TIMER_DELIVER_MS" not in props
    assert broker.messages.consume_queue(SCHEDULE_TOPIC, 17).get(0).tags_code == \
        parked[0].store_ms + 7_200_000


@pytest.mark.parametrize("level", ["0", "-1"])
def test_level_zero_or_negative_means_no_level(broker, level):
    r = broker.send(Message("orders", b"x", properties={"DELAY": level}))
    assert r.route == "immediate" and len(broker.pull("orders")) == 1


def test_keyword_arguments_set_the_rocketmq_properties(broker, clock):
    r = broker.send(Message("orders", b"x"), deliver_at=dt.datetime.fromtimestamp(
        (clock.now_ms() + 5000) / 1000, tz=dt.timezone.utc))
    assert r.deliver_at_ms == clock.now_ms() + 5000
    r = broker.send(Message("orders", b"x"), delay_level=2)
    assert r.route == "level" and r.deliver_at_ms == clock.now_ms() + 5000
