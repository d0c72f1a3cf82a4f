"""The metrics HTTP front answers through a write buffer (headers and body in one send): an
answer larger than the buffer still arrives whole, and a kept-alive connection gets each answer
complete (every request's answer is flushed before the next is read)."""
from __future__ import annotations

import http.client

from rocks_timer import Broker, BrokerConfig, ManualClock, Message
from rocks_timer.metrics import MetricsServer, default_labels
from rocks_timer.metrics.server import WRITE_BUFFER
from tests.support.metrics_support import samples, series

T0 = 1_767_225_600_000
TOPICS = 2_500  # a rocketmq_timing_messages series each: past the write buffer


def test_a_large_answer_and_a_kept_alive_connection(tmp_path):
    with Broker.open(tmp_path / "b", BrokerConfig(), clock=ManualClock(T0)) as broker:
        broker.send_batch([Message(f"topic-{i:04d}-with-a-longer-name-than-most", b"x")
                           for i in range(TOPICS)], delay_ms=60_000)
        server = MetricsServer(broker, "127.0.0.1", 0, dashboard=True,
                               labels=default_labels()).start()
        try:
            host, port = server.address.rsplit(":", 1)
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            bodies = []
            for path in ("/metrics", "/api/dashboard", "/metrics"):
                conn.request("GET", path)
                reply = conn.getresponse()
                body = reply.read()
                assert reply.status == 200
                assert int(reply.getheader("Content-Length")) == len(body)
                bodies.append(body)
            conn.close()
        finally:
            server.stop()
        assert len(bodies[0]) > WRITE_BUFFER
        found = samples(bodies[2].decode())
        by_topic = series(found, "rocketmq_timing_messages", "topic")
        assert len(by_topic) == TOPICS and set(by_topic.values()) == {1}
        assert b'"pending": 2500' in bodies[1]
