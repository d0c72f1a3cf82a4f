"""The Broker methods the remoting front uses (pull_page, min/max offsets, message_at, topics,
arrival watching) and the consumer offsets' find / commit_many."""
from __future__ import annotations

import pytest

from rocks_timer import Broker, BrokerConfig, ManualClock, Message
from rocks_timer.errors import CorruptRecordError


@pytest.fixture
def broker(tmp_path):
    with Broker.open(tmp_path / "data", BrokerConfig(), clock=ManualClock(1_800_000_000_000)) as b:
        yield b


def test_pull_page_offsets_message_at_and_topics(broker):
    for i in range(3):
        broker.send(Message(topic="orders", body=f"m{i}".encode(), queue_id=1))
    messages, next_offset = broker.pull_page("orders", 1, 1, 10)
    assert [m.body for m in messages] == [b"m1", b"m2"] and next_offset == 3
    assert (broker.min_offset("orders", 1), broker.max_offset("orders", 1)) == (0, 3)
    assert (broker.min_offset("none", 0), broker.max_offset("none", 0)) == (0, 0)
    assert broker.message_at(messages[0].commitlog_offset).body == b"m1"
    with pytest.raises(CorruptRecordError):
        broker.message_at(messages[0].commitlog_offset + 1)
    with pytest.raises(KeyError):
        broker.message_at(10**12)
    assert "orders" in broker.topics()


def test_arrival_watchers_see_the_topics_written(broker):
    seen = []
    broker.watch_arrivals(seen.append)
    broker.send(Message(topic="a", body=b"x"))
    broker.unwatch_arrivals(seen.append)
    broker.unwatch_arrivals(seen.append)  # twice is harmless
    broker.send(Message(topic="b", body=b"x"))
    assert [set(t) for t in seen] == [{"a"}]


def test_consumer_offsets_find_and_commit_many(broker):
    offsets = broker.consumer_offsets
    assert offsets.find("orders", "g", 0) is None
    offsets.commit_many({("orders", "g", 0): 5, ("orders", "g", 1): 7, ("other", "h", 0): 1})
    assert offsets.find("orders", "g", 0) == 5 and offsets.get("orders", "g", 1) == 7
    assert offsets.table()[("other", "h", 0)] == 1
    with pytest.raises(ValueError):
        offsets.commit_many({("bad topic", "g", 0): 1})
