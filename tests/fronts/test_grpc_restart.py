"""``kill -9`` of a broker serving the official client: a pending DELAY message and a received but
unacked message (its invisibility record lives in the timer engine) are both delivered after
the restart."""
from __future__ import annotations

import time

from tests.support.grpc_support import BrokerProcess, bad_log_lines, config, log_offset, message, receive_until
from rocketmq import FilterExpression, Producer, SimpleConsumer


def test_pending_delay_and_unacked_message_survive_kill_9(tmp_path):
    data = tmp_path / "data"
    start = log_offset()
    broker = BrokerProcess(data).start()
    try:
        producer = Producer(config(broker.endpoint))
        producer.startup()
        producer.send(message("RestartTopic", b"received, not acked"))
        due_s = int(time.time()) + 3
        producer.send(message("RestartTopic", b"pending delay", deliver_s=due_s))
        producer.shutdown()
        consumer = SimpleConsumer(config(broker.endpoint), "RestartGroup",
                                  {"RestartTopic": FilterExpression()}, await_duration=2)
        consumer.startup()
        [first] = receive_until(consumer, 1, 2, 10, ack=False)  # invisible for 2 s
        assert first.body == b"received, not acked" and first.delivery_attempt == 1
        consumer.shutdown()
        broker.kill9()
    finally:
        broker.stop()

    broker = BrokerProcess(data).start()
    try:
        consumer = SimpleConsumer(config(broker.endpoint), "RestartGroup",
                                  {"RestartTopic": FilterExpression()}, await_duration=3)
        consumer.startup()
        got = receive_until(consumer, 2, 30, 15)
        consumer.shutdown()
        by_body = {m.body: m for m in got}
        assert set(by_body) == {b"received, not acked", b"pending delay"}, got
        assert by_body[b"received, not acked"].delivery_attempt == 2
        assert by_body[b"received, not acked"].message_id == first.message_id
        assert by_body[b"pending delay"].received_at >= due_s
        assert len(got) == 2  # each exactly once
    finally:
        output = broker.stop()
    assert "Traceback" not in output, output
    assert bad_log_lines(start) == []  # the clients were shut down before the kill
