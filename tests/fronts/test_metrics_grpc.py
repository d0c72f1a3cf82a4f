"""The gRPC front's share of ``/metrics``, with the official RocketMQ 5 client against a real
``rtimer run``: its requests and failures per RPC, and messages received (pop) as
``rocketmq_messages_out_total{consume_mode="pop"}``."""
from __future__ import annotations

import re
import time

import pytest
from tests.support.grpc_support import config, message, receive_until
from rocketmq import FilterExpression, Producer, SimpleConsumer

from tests.support.metrics_support import MetricsBroker, samples, value


def test_grpc_requests_errors_and_pops_are_scraped(tmp_path):
    broker = MetricsBroker(tmp_path / "data", "--grpc-listen", "127.0.0.1:0").start()
    endpoint = re.search(r"listening on (127\.0\.0\.1:\d+)", "".join(broker.output)).group(1)
    producer = Producer(config(endpoint))
    producer.startup()
    consumer = SimpleConsumer(config(endpoint), "metrics-group",
                              {"metered": FilterExpression("*")}, await_duration=2)
    consumer.startup()
    try:
        producer.send(message("metered", b"one"))
        producer.send(message("metered", b"two"))
        receipt = producer.send(message("metered", b"later", deliver_s=int(time.time()) + 3600))
        producer.recall_message("metered", receipt.recall_handle)
        # a second recall of the same handle is an error status (DECISIONS, gRPC front)
        with pytest.raises(Exception):  # noqa: B017 - the client's own exception type
            producer.recall_message("metered", receipt.recall_handle)
        got = receive_until(consumer, 2, 30, 20)
        assert sorted(m.body for m in got) == [b"one", b"two"]
        found = samples(broker.scrape())
        assert value(found, "rtimer_front_requests_total", front="grpc",
                     method="SendMessage") == 3
        assert value(found, "rtimer_front_requests_total", front="grpc",
                     method="RecallMessage") == 2
        assert value(found, "rtimer_front_errors_total", front="grpc",
                     method="RecallMessage") == 1
        assert value(found, "rtimer_front_errors_total", front="grpc",
                     method="SendMessage") == 0
        assert value(found, "rtimer_front_requests_total", front="grpc",
                     method="AckMessage") == 2
        assert value(found, "rocketmq_messages_out_total", consume_mode="pop") == 2
        assert value(found, "rtimer_cancelled_total") == 1
    finally:
        consumer.shutdown()
        producer.shutdown()
        broker.stop()
