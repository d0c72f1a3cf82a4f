"""``Broker.send_batch`` of one message (a front's single send) takes ``route`` where a batch
takes ``route_batch``: the same results and the same refusals as the batch path gives that
message in a batch of two (its neighbour a plain message), and as ``send`` gives, on brokers
alike under one clock."""
from __future__ import annotations

import pytest

from rocks_timer.errors import RocksTimerError
from rocks_timer.message import Message

UNIQ = "0A0B0C0D0E0F10111213141516170001"
CASES = [
    Message(topic="T", body=b"now", msg_id=UNIQ, keys=("a", "b"), tags="t"),
    Message(topic="T", body=b"level", properties={"DELAY": "3"}),
    Message(topic="T", body=b"clamped", properties={"DELAY": "99"}),
    Message(topic="T", body=b"timer", properties={"TIMER_DELAY_MS": "60000"}),
    Message(topic="T", body=b"past", properties={"TIMER_DELIVER_MS": "1"}),
    Message(topic="T", body=b"id-less"),
    Message(topic="bad topic", body=b"x"),
    Message(topic="rmq_sys_x", body=b"x"),
    Message(topic="T", body=b"x", properties={"REAL_TOPIC": "U"}),
    Message(topic="T", body=b"x", properties={"TIMER_DELAY_MS": "soon"}),
    Message(topic="T", body=b"x", properties={"TIMER_DELAY_SEC": str(10**9)}),
    Message(topic="T", body=b"x", keys=("bad key",)),
]


def outcome(call):
    try:
        return [(r.handle is not None, r.deliver_at_ms, r.topic, r.queue_id, r.route)
                for r in call()]
    except RocksTimerError as exc:
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("message", CASES, ids=lambda m: m.body.decode())
def test_one_message_is_sent_as_in_a_batch_and_as_send_sends_it(make_broker, tmp_path, message):
    single, batch, plain = (make_broker("rocksdb", path=tmp_path / name)
                            for name in ("single", "batch", "plain"))
    neighbour = Message(topic="N", body=b"n")
    alone = outcome(lambda: single.send_batch([message]))
    paired = outcome(lambda: batch.send_batch([message, neighbour]))
    if isinstance(paired, list):
        paired = paired[:1]
    assert alone == paired
    assert alone == outcome(lambda: [plain.send(message)])
    if isinstance(alone, list) and alone[0][4] == "immediate":
        assert [m.body for m in single.pull("T", 0, 0, 5)] == [message.body]
