"""Pop consumption goes through the Broker's public methods (``park``, ``unpark``,
``pull_batch``, ``message_at``, ``queue_ranges``, ``watch_arrivals``): the Broker counts what
it parks and takes back, and the revival is delivered by the Broker's own timer loop."""
from __future__ import annotations

import pytest

from tests.support.engine_helpers import ENGINES, drive, engine_settings, pulled
from rocks_timer import Broker, BrokerConfig, Message
from rocks_timer.pop.handles import retry_topic
from rocks_timer.pop.service import PopService, ReceiptExpiredError


@pytest.mark.parametrize("engine", ENGINES)
def test_pop_ack_and_change_invisible_are_counted_by_the_broker(make_broker, clock, engine):
    broker = make_broker(engine)
    for i in range(3):
        broker.send(Message(topic="orders", body=b"m%d" % i))
    pop = PopService(broker)
    popped = pop.pop("g", "orders", 3, 30_000)
    assert [p.message.body for p in popped] == [b"m0", b"m1", b"m2"]
    stats = broker.stats()
    assert (stats["parked"], stats["unparked"]) == (3, 0)
    assert stats["sent"]["timer"] == 0 and stats["cancelled"] == 0  # no producer sent them
    assert stats["pending"] == 3
    pop.ack("g", "orders", popped[0].receipt_handle)
    fresh = pop.change_invisible("g", "orders", popped[1].receipt_handle, 60_000)
    stats = broker.stats()
    # the ack takes one back; the change parks a new record and takes the old one back
    assert (stats["parked"], stats["unparked"], stats["pending"]) == (4, 2, 2)
    if engine != "wheel":  # its cancel is a best-effort marker: it answers True for any id
        with pytest.raises(ReceiptExpiredError):
            pop.ack("g", "orders", popped[0].receipt_handle)
        assert broker.stats()["unparked"] == 2
    pop.ack("g", "orders", fresh)
    assert broker.stats()["unparked"] == 3
    pop.close()


def test_an_unacked_pop_is_revived_by_the_brokers_timer_loop(make_broker, clock):
    broker = make_broker("rocksdb")
    broker.send(Message(topic="orders", body=b"once"))
    pop = PopService(broker)
    [first] = pop.pop("g", "orders", 1, 5_000)
    delivered = drive(broker, clock, clock.now_ms() + 5_000)
    assert delivered == 1 and broker.stats()["delivered"] == 1 == broker.delivered
    [revived] = pulled(broker, retry_topic("g", "orders"))
    assert revived.body == b"once" and revived.reconsume_times == 1
    [again] = pop.pop("g", "orders", 1, 5_000)
    assert again.delivery_attempt == 2 and again.message.body == b"once"
    assert first.receipt_handle != again.receipt_handle
    assert broker.stats()["parked"] == 2
    pop.close()


def test_pop_watchers_ride_on_the_brokers_arrival_watch(tmp_path, clock):
    config = BrokerConfig(**engine_settings("memory")).validate()
    with Broker.open(tmp_path / "d", config, clock=clock) as broker:
        pop = PopService(broker)
        seen = []
        pop.watch(pop.watched_topics("g", "orders"), lambda: seen.append(1))
        broker.send(Message(topic="orders", body=b"x"))
        broker.send(Message(topic="other", body=b"x"))
        pop.close()  # unwatched: later sends reach no pop watcher
        broker.send(Message(topic="orders", body=b"y"))
        assert seen == [1]
