"""One contract, every engine (memory reference, RocksDB, file wheel), through the Broker."""
import pytest

from rocks_timer import InvalidHandleError, Message
from rocks_timer.message import TIMER_DELIVER_MS, TIMER_OUT_MS
from tests.support.engine_helpers import DURABLE_ENGINES, ENGINES, drive, pulled

every_engine = pytest.mark.parametrize("engine", ENGINES)


@every_engine
def test_never_early_and_delivered_after_due(engine, make_broker, clock):
    broker = make_broker(engine)
    start = clock.now_ms()
    sends = [broker.send(Message("orders", f"m{i}".encode(), tags="T", keys=[f"k{i}"]),
                         delay_ms=d) for i, d in enumerate([300, 1000, 1050, 2500, 2500])]
    drive(broker, clock, start + 299)
    assert pulled(broker, "orders") == []
    drive(broker, clock, start + 4000)
    got = pulled(broker, "orders")
    assert sorted(m.msg_id for m in got) == sorted(s.msg_id for s in sends)
    due = {s.msg_id: s.deliver_at_ms for s in sends}
    for m in got:
        assert m.store_ms >= due[m.msg_id], "delivered early"
        assert m.properties[TIMER_DELIVER_MS] == str(due[m.msg_id])
        assert int(m.properties[TIMER_OUT_MS]) <= due[m.msg_id] + 1
        assert (m.topic, m.queue_id, m.tags) == ("orders", 0, "T")
        assert m.keys == (f"k{int(m.body[1:])}",)


@every_engine
def test_real_queue_id_is_restored(engine, make_broker, clock):
    broker = make_broker(engine)
    sent = broker.send(Message("orders", b"q3", queue_id=3), delay_ms=500)
    drive(broker, clock, clock.now_ms() + 2000)
    [m] = pulled(broker, "orders", 3)
    assert m.msg_id == sent.msg_id and m.queue_id == 3


@every_engine
def test_cancel_before_due_means_never_delivered(engine, make_broker, clock):
    broker = make_broker(engine)
    keep = broker.send(Message("orders", b"keep"), delay_ms=5000)
    drop = broker.send(Message("orders", b"drop"), delay_ms=5000)
    assert broker.cancel(drop.handle) is True
    drive(broker, clock, clock.now_ms() + 8000)
    assert [m.msg_id for m in pulled(broker, "orders")] == [keep.msg_id]


@every_engine
def test_cancel_after_delivery_is_false(engine, make_broker, clock):
    broker = make_broker(engine)
    sent = broker.send(Message("orders", b"x"), delay_ms=500)
    drive(broker, clock, clock.now_ms() + 2000)
    assert len(pulled(broker, "orders")) == 1
    assert broker.cancel(sent.handle) is False


@every_engine
def test_malformed_handles_raise(engine, make_broker):
    broker = make_broker(engine)
    for bad in ["", "zzz", "djEgb3JkZXJz", "v1 orders 1 ABC"]:
        with pytest.raises(InvalidHandleError):
            broker.cancel(bad)


@every_engine
def test_scan_lists_pending_in_due_order_with_pages(engine, make_broker, clock):
    broker = make_broker(engine)
    now = clock.now_ms()
    sends = [broker.send(Message("a" if i % 2 else "b", b"x" * i), deliver_at_ms=now + 10_000 - i * 100)
             for i in range(1, 26)]
    page = broker.scan(limit=10)
    assert len(page) == 10
    seen = list(page)
    while page.next_after:
        page = broker.scan(limit=10, after=page.next_after)
        seen.extend(page)
    assert [e.msg_id for e in seen] == [s.msg_id for s in reversed(sends)]
    assert [e.deliver_at_ms for e in seen] == sorted(e.deliver_at_ms for e in seen)
    assert all(e.handle and e.size == len(b"x" * int(e.size)) for e in seen)
    only_a = broker.scan(topic="a", limit=100)
    assert {e.topic for e in only_a} == {"a"} and len(only_a) == 13
    window = broker.scan(from_ms=now + 8_000, to_ms=now + 9_000, limit=100)
    assert all(now + 8_000 <= e.deliver_at_ms <= now + 9_000 for e in window) and window


@every_engine
def test_many_due_at_once_are_delivered_over_budgeted_ticks(engine, make_broker, clock):
    broker = make_broker(engine, timer_deliver_batch=50)
    due = clock.now_ms() + 1000
    broker.send_batch([Message("burst", str(i).encode()) for i in range(400)], deliver_at_ms=due)
    drive(broker, clock, due + 2000)
    for _ in range(20):
        broker.tick()
    got = pulled(broker, "burst")
    assert len(got) == 400 and len({m.msg_id for m in got}) == 400


@pytest.mark.parametrize("engine", DURABLE_ENGINES)  # the memory reference is not durable
def test_pending_survives_reopen(engine, make_broker, clock, tmp_path):
    path = tmp_path / "durable"
    broker = make_broker(engine, path=path)
    sent = broker.send(Message("orders", b"later"), delay_ms=3000)
    now_sent = broker.send(Message("orders", b"now"))
    broker.close()
    broker = make_broker(engine, path=path)
    assert [e.msg_id for e in broker.scan()] == [sent.msg_id]
    drive(broker, clock, clock.now_ms() + 5000)
    assert [m.msg_id for m in pulled(broker, "orders")] == [now_sent.msg_id, sent.msg_id]
