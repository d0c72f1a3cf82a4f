"""Find, cancel and reschedule by business key, and the due histogram: one contract for the
memory reference and both RocksDB layouts; the wheel refuses the key operations plainly and
counts its slots."""
import pytest

from rocks_timer import (DelayOutOfRangeError, InvalidHandleError, InvalidMessageError, Message,
                         UnsupportedOperationError)
from rocks_timer.message import TIMER_DELIVER_MS, TIMER_OUT_MS
from tests.support.engine_helpers import DURABLE_ENGINES, drive, pulled

KEYED = ["memory", "rocksdb", "rocksdb-inline"]
keyed_engine = pytest.mark.parametrize("engine", KEYED)


def order(i: int, *keys: str, topic: str = "orders", body: bytes = b"") -> Message:
    return Message(topic, body or f"order {i}".encode(), keys=keys or (f"order-{i}",))


@keyed_engine
def test_find_lists_pending_entries_of_a_key_like_scan(engine, make_broker, clock):
    broker = make_broker(engine)
    now = clock.now_ms()
    a = broker.send(order(1, "order-1", "cust-7"), delay_ms=5_000)
    b = broker.send(order(2, "cust-7"), delay_ms=3_000)
    broker.send(order(3, "cust-8"), delay_ms=4_000)
    broker.send(order(4, "cust-7", topic="payments"), delay_ms=4_000)
    broker.send(Message("orders", b"no keys"), delay_ms=4_000)
    found = broker.find("orders", "cust-7")
    assert [e.msg_id for e in found] == [b.msg_id, a.msg_id]  # due order
    assert found.next_after is None
    by_scan = {e.msg_id: e for e in broker.scan(topic="orders")}
    assert list(found) == [by_scan[b.msg_id], by_scan[a.msg_id]]
    assert [e.msg_id for e in broker.find("orders", "order-1")] == [a.msg_id]
    assert list(broker.find("orders", "cust-9")) == []
    first = broker.find("orders", "cust-7", limit=1)
    assert [e.msg_id for e in first] == [b.msg_id] and first.next_after
    rest = broker.find("orders", "cust-7", limit=1, after=first.next_after)
    assert [e.msg_id for e in rest] == [a.msg_id] and rest.next_after is None
    assert all(e.deliver_at_ms > now for e in found)


@keyed_engine
def test_cancel_by_key_cancels_every_pending_one_and_counts(engine, make_broker, clock):
    broker = make_broker(engine)
    gone = [broker.send(order(i, "cust-7"), delay_ms=2_000 + i) for i in range(3)]
    kept = broker.send(order(9, "cust-8"), delay_ms=2_000)
    cancelled = broker.cancel_by_key("orders", "cust-7")
    assert cancelled == 3 and sorted(cancelled.handles) == sorted(s.handle for s in gone)
    assert broker.cancel_by_key("orders", "cust-7") == 0
    assert all(broker.cancel(s.handle) is False for s in gone)
    drive(broker, clock, clock.now_ms() + 5_000)
    assert [m.msg_id for m in pulled(broker, "orders")] == [kept.msg_id]
    assert broker.cancel_by_key("orders", "cust-8") == 0  # delivered: nothing to cancel


@keyed_engine
def test_reschedule_moves_delivery_once_to_the_new_time(engine, make_broker, clock):
    broker = make_broker(engine)
    start = clock.now_ms()
    sent = broker.send(order(1), delay_ms=10_000)
    result = broker.reschedule(sent.handle, start + 2_500)
    assert result.status == "rescheduled" and result.msg_id == sent.msg_id
    assert result.handle != sent.handle and result.deliver_at_ms == start + 2_500
    assert result.old_handle == sent.handle
    assert [e.handle for e in broker.scan()] == [result.handle]
    assert broker.cancel(sent.handle) is False  # the old handle names nothing now
    drive(broker, clock, start + 2_499)
    assert pulled(broker, "orders") == []
    drive(broker, clock, start + 12_000)
    [m] = pulled(broker, "orders")
    assert m.msg_id == sent.msg_id and m.store_ms >= start + 2_500
    assert m.properties[TIMER_DELIVER_MS] == str(start + 2_500)
    assert m.properties[TIMER_OUT_MS] == str(start + 2_500)
    again = broker.reschedule(result.handle, start + 50_000)
    assert again.status == "not_found" and again.handle is None


@keyed_engine
def test_reschedule_later_and_into_the_past(engine, make_broker, clock):
    broker = make_broker(engine)
    start = clock.now_ms()
    later = broker.send(order(1), delay_ms=1_000)
    past = broker.send(order(2), delay_ms=60_000)
    moved = broker.reschedule(later.handle, start + 30_000)
    at_once = broker.reschedule(past.handle, start - 5_000)
    assert at_once.status == "rescheduled" and at_once.deliver_at_ms <= clock.now_ms() + 1
    drive(broker, clock, start + 200)
    assert [m.msg_id for m in pulled(broker, "orders")] == [past.msg_id]
    drive(broker, clock, start + 29_000)
    assert len(pulled(broker, "orders")) == 1
    drive(broker, clock, start + 31_000)
    got = pulled(broker, "orders")
    assert [m.msg_id for m in got] == [past.msg_id, later.msg_id]
    assert got[1].store_ms >= moved.deliver_at_ms


@keyed_engine
def test_reschedule_refusals_change_nothing(engine, make_broker, clock):
    broker = make_broker(engine)
    sent = broker.send(order(1), delay_ms=5_000)
    too_far = clock.now_ms() + broker.config.max_delay_ms + 1
    with pytest.raises(DelayOutOfRangeError):
        broker.reschedule(sent.handle, too_far)
    with pytest.raises(DelayOutOfRangeError):
        broker.reschedule_by_key("orders", "order-1", too_far)
    with pytest.raises(InvalidHandleError):
        broker.reschedule("not-a-handle", clock.now_ms() + 1_000)
    with pytest.raises(InvalidMessageError):
        broker.reschedule(sent.handle, "soon")
    assert [e.handle for e in broker.scan()] == [sent.handle]
    level = broker.send(order(2), delay_level=2)
    assert level.handle is None  # levels have no handle, and no key index entry
    assert list(broker.find("orders", "order-2")) == []
    assert broker.reschedule_by_key("orders", "order-2", clock.now_ms() + 9_000) == []


@keyed_engine
def test_in_flight_and_delivered_messages_are_reported_not_changed(engine, make_broker, clock):
    broker = make_broker(engine)
    start = clock.now_ms()
    sent = broker.send(order(1, "cust-7"), delay_ms=1_000)
    clock.set(start + 1_000)
    claimed = broker.timer.claim_due(clock.now_ms(), 10, 1 << 20)  # as the deliverer does
    assert [r.key.msg_id for r in claimed] == [sent.msg_id]
    result = broker.reschedule(sent.handle, start + 9_000)
    assert result.status == "in_flight" and result.handle is None
    assert [r.status for r in broker.reschedule_by_key("orders", "cust-7", start + 9_000)] == \
        ["in_flight"]
    assert broker.cancel_by_key("orders", "cust-7") == 0
    assert [e.msg_id for e in broker.find("orders", "cust-7")] == [sent.msg_id]


@keyed_engine
def test_reschedule_by_key_moves_all_in_one_step(engine, make_broker, clock):
    broker = make_broker(engine)
    start = clock.now_ms()
    sends = [broker.send(order(i, "auction-5"), delay_ms=10_000 + i) for i in range(3)]
    other = broker.send(order(7, "auction-6"), delay_ms=10_000)
    results = broker.reschedule_by_key("orders", "auction-5", start + 60_000)
    assert [r.msg_id for r in results] == [s.msg_id for s in sends]
    assert {r.status for r in results} == {"rescheduled"}
    assert {r.deliver_at_ms for r in results} == {start + 60_000}
    assert [e.msg_id for e in broker.find("orders", "auction-5")] == \
        sorted(s.msg_id for s in sends)  # same due: msg id order
    drive(broker, clock, start + 20_000, step_ms=1_000)
    assert [m.msg_id for m in pulled(broker, "orders")] == [other.msg_id]
    drive(broker, clock, start + 61_000, step_ms=1_000)
    assert len(pulled(broker, "orders")) == 4


@keyed_engine
def test_bad_topic_or_key_is_a_clear_error(engine, make_broker):
    broker = make_broker(engine)
    for topic, key in [("bad topic", "k"), ("orders", ""), ("orders", "two words"),
                       ("SCHEDULE_TOPIC_XXXX", "k")]:
        with pytest.raises(InvalidMessageError):
            broker.find(topic, key)
        with pytest.raises(InvalidMessageError):
            broker.cancel_by_key(topic, key)


@keyed_engine
def test_due_histogram_is_exact(engine, make_broker, clock):
    broker = make_broker(engine, timer_max_delay_sec=40 * 86_400)
    now = clock.now_ms()  # a whole second
    delays = [500, 59_000, 61_000, 3_000_000, 3_700_000, 80_000_000, 90_000_000,
              500_000_000, 700_000_000, 30 * 86_400_000]
    for i, d in enumerate(delays):
        broker.send(order(i), delay_ms=d)
    hist = broker.due_histogram(days=3)
    assert hist["from_ms"] == now
    assert hist["buckets"] == {"now": 0, "minute": 2, "hour": 2, "day": 2, "week": 2,
                               "later": 2}
    assert [d["count"] for d in hist["days"]] == [
        sum(1 for d in delays if k * 86_400_000 <= d < (k + 1) * 86_400_000) for k in range(3)]
    assert hist["days"][0]["day"] == "2026-01-01"
    assert broker.stats()["due"]["buckets"] == hist["buckets"]
    clock.advance(60_000)
    broker.tick()
    assert broker.due_histogram(days=0)["buckets"]["minute"] == 1  # the 61 s one
    assert sum(broker.due_histogram(days=0)["buckets"].values()) == broker.stats()["pending"]


@pytest.mark.parametrize("engine", ["rocksdb", "rocksdb-inline"])
def test_index_and_counters_survive_reopen(engine, make_broker, clock, tmp_path):
    path = tmp_path / "keyed"
    broker = make_broker(engine, path=path)
    start = clock.now_ms()
    a = broker.send(order(1, "cust-7"), delay_ms=5_000)
    broker.send(order(2, "cust-7"), delay_ms=7_000)
    broker.reschedule(a.handle, start + 9_000)
    broker.close()
    broker = make_broker(engine, path=path)
    assert [e.deliver_at_ms for e in broker.find("orders", "cust-7")] == [start + 7_000,
                                                                          start + 9_000]
    assert broker.due_histogram(days=0)["buckets"]["minute"] == 2
    assert broker.timer.check()["problems"] == []


def test_the_wheel_says_plainly_what_it_cannot_do(make_broker, clock):
    broker = make_broker("wheel")
    sent = broker.send(order(1), delay_ms=5_000)
    for call in (lambda: broker.find("orders", "order-1"),
                 lambda: broker.cancel_by_key("orders", "order-1"),
                 lambda: broker.reschedule(sent.handle, clock.now_ms() + 9_000),
                 lambda: broker.reschedule_by_key("orders", "order-1", clock.now_ms() + 9_000)):
        with pytest.raises(UnsupportedOperationError, match="wheel"):
            call()
    broker.send(order(2), delay_ms=90_000)
    hist = broker.due_histogram(days=1)
    assert hist["basis"].startswith("wheel slot")
    assert hist["buckets"]["minute"] == 1 and hist["buckets"]["hour"] == 1
    assert hist["days"][0]["count"] == 2


@pytest.mark.parametrize("engine", DURABLE_ENGINES)
def test_histogram_sums_to_pending_after_deliveries(engine, make_broker, clock):
    broker = make_broker(engine)
    for i in range(20):
        broker.send(order(i), delay_ms=1_000 * (i + 1))
    drive(broker, clock, clock.now_ms() + 10_500)
    buckets = broker.due_histogram(days=0)["buckets"]
    assert sum(buckets.values()) == broker.stats()["pending"] == 10
