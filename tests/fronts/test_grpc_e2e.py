"""The official RocketMQ 5 Python client (unmodified, pinned) against ``rtimer run --grpc-listen``
in a real subprocess: send/receive/ack, DELAY, recall, redelivery, change-invisible-duration,
push consumer, and the delivery-time limit. One broker serves the whole module; each test uses
its own topic and group."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from tests.support.grpc_support import (ROOT, TRANSPORTS, BrokerProcess, bad_log_lines, config,
                                        log_offset, message, receive_until)
import rocketmq
from rocketmq import ConsumeResult, FilterExpression, MessageListener, Producer, PushConsumer
from rocketmq import SimpleConsumer, TransactionChecker, TransactionResolution
from rocketmq.grpc_protocol import Metric
from rocketmq.v5.exception import BadRequestException, NotFoundException, UnsupportedException

MAX_DELAY_S = 3600
# the two flows that wait on the clock longest (5-6 s each) run on the default transport only;
# grpcio answers the same requests with the same answers (test_grpc_native_transport's equality
# test) and runs every other flow here
NATIVE_ONLY = pytest.mark.parametrize("broker", ["native"], indirect=True)


@pytest.fixture(scope="module", params=TRANSPORTS)
def broker(tmp_path_factory, request):
    """Every test runs against both transports of the front (native HTTP/2, and grpcio)."""
    conf = tmp_path_factory.mktemp("grpc-conf") / "broker.toml"
    conf.write_text(f"timer_max_delay_sec = {MAX_DELAY_S}\n")
    proc = BrokerProcess(tmp_path_factory.mktemp("grpc-data"), "--config", str(conf),
                         transport=request.param).start()
    yield proc
    output = proc.stop()
    assert "Traceback" not in output, output


@pytest.fixture
def clean_log():
    """The flow must leave no WARN/ERROR line in the client's log."""
    start = log_offset()
    yield
    assert bad_log_lines(start) == []


@pytest.fixture
def producer(broker):
    client = Producer(config(broker.endpoint))
    client.startup()
    yield client
    client.shutdown()


def simple_consumer(broker, group, topic, await_s=5, expression="*"):
    consumer = SimpleConsumer(config(broker.endpoint), group,
                              {topic: FilterExpression(expression)}, await_duration=await_s)
    consumer.startup()
    return consumer


@NATIVE_ONLY
def test_send_receive_ack_keeps_tag_keys_and_properties(broker, producer, clean_log):
    receipt = producer.send(message("E2eNormal", b"order 42", tag="created", keys="k42",
                                    properties={"region": "eu", "amount": "12.50"}))
    assert receipt.recall_handle is None
    # a 1 s long poll: the empty one at the end checks the ack, and the message would come
    # back only after its 10 s invisible time, whether the poll waits 1 s or 5
    consumer = simple_consumer(broker, "GroupNormal", "E2eNormal", await_s=1)
    try:
        [got] = receive_until(consumer, 1, 10, 10)
        assert got.message_id == receipt.message_id
        assert (got.topic, got.body, got.tag) == ("E2eNormal", b"order 42", "created")
        assert set(got.keys) == {"k42"}
        assert got.properties == {"region": "eu", "amount": "12.50"}
        assert got.delivery_attempt == 1 and not got.corrupted
        assert consumer.receive(16, 10) == []  # acked: gone for this group (one empty long poll)
    finally:
        consumer.shutdown()


def test_tag_filter_skips_other_tags(broker, producer, clean_log):
    producer.send(message("E2eTags", b"skip me", tag="other"))
    producer.send(message("E2eTags", b"take me", tag="wanted"))
    consumer = simple_consumer(broker, "GroupTags", "E2eTags", expression="wanted || more")
    try:
        [got] = receive_until(consumer, 1, 10, 10)
        assert got.body == b"take me"
    finally:
        consumer.shutdown()


def test_delay_message_is_never_early_and_on_time(broker, producer, clean_log):
    due_s = int(time.time()) + 2
    receipt = producer.send(message("E2eDelay", b"later", deliver_s=due_s))
    assert receipt.recall_handle
    consumer = simple_consumer(broker, "GroupDelay", "E2eDelay")
    try:
        [got] = receive_until(consumer, 1, 10, 15)
        assert got.body == b"later" and got.delivery_timestamp == due_s * 1000
        assert due_s <= got.received_at <= due_s + 1.5, (due_s, got.received_at)
    finally:
        consumer.shutdown()


def test_recall_then_second_recall_raises(broker, producer, clean_log):
    due_s = int(time.time()) + 3
    receipt = producer.send(message("E2eRecall", b"never", deliver_s=due_s))
    assert producer.recall_message("E2eRecall", receipt.recall_handle) == receipt.message_id
    with pytest.raises(NotFoundException):
        producer.recall_message("E2eRecall", receipt.recall_handle)
    # the recall handle is the library's cancel handle: rtimer cancel agrees it is gone
    out = subprocess.run([sys.executable, "-m", "cli.main", "--data-dir", str(broker.data_dir),
                          "cancel", "--json", receipt.recall_handle], capture_output=True,
                         text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                         timeout=60)
    assert out.returncode == 1 and json.loads(out.stdout)[0]["cancelled"] is False, out


def test_unacked_message_comes_back_with_attempt_2(broker, producer, clean_log):
    producer.send(message("E2eRetry", b"again"))
    consumer = simple_consumer(broker, "GroupRetry", "E2eRetry")
    try:
        [first] = receive_until(consumer, 1, 1, 10, ack=False)
        assert first.delivery_attempt == 1
        [second] = receive_until(consumer, 1, 10, 10)
        assert second.message_id == first.message_id and second.body == b"again"
        assert second.delivery_attempt == 2
        # client-side stamps, taken after each stream was decoded: allow their jitter
        assert second.received_at - first.received_at >= 0.9
    finally:
        consumer.shutdown()


@NATIVE_ONLY
def test_change_invisible_duration_then_ack(broker, producer, clean_log):
    producer.send(message("E2eInvisible", b"slow work"))
    consumer = simple_consumer(broker, "GroupInvisible", "E2eInvisible", await_s=4)
    try:
        [got] = receive_until(consumer, 1, 2, 10, ack=False)
        old_handle = got.receipt_handle
        consumer.change_invisible_duration(got, 30)
        assert got.receipt_handle != old_handle
        consumer.ack(got)
        # past the first invisible time (2 s) nothing comes back: the record moved, then was
        # acked (one long poll of 4 s; with 3 s polls the 3.5 s wait took two, 6 s)
        assert receive_until(consumer, 1, 10, 3.5) == []
        with pytest.raises(BadRequestException):
            consumer.ack(got)  # a second ack of the same handle: the record is gone
    finally:
        consumer.shutdown()


def test_push_consumer_receives_and_acks(broker, producer, clean_log):
    done = threading.Event()
    seen = []

    class Listener(MessageListener):
        def consume(self, msg):
            seen.append((msg.body, msg.delivery_attempt))
            done.set()
            return ConsumeResult.SUCCESS

    producer.send(message("E2ePush", b"pushed"))
    consumer = PushConsumer(config(broker.endpoint), "GroupPush", Listener(),
                            {"E2ePush": FilterExpression()})
    consumer.startup()
    try:
        assert done.wait(20)
        assert seen == [(b"pushed", 1)]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _pending(broker, "%RETRY%GroupPush_E2ePush"):
            time.sleep(0.1)  # the ack lands just after the listener returns
        assert _pending(broker, "%RETRY%GroupPush_E2ePush") == []
    finally:
        consumer.shutdown()
        # the client leaves its meter provider to an atexit export, when this module's
        # broker is gone: flush it now, while the broker's metrics sink still answers
        consumer.client_metrics.reset_metrics(Metric(on=False))


def _pending(broker, topic):
    out = subprocess.run([sys.executable, "-m", "cli.main", "--data-dir", str(broker.data_dir),
                          "scan", "--json", "--topic", topic], capture_output=True, text=True,
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert out.returncode == 0, out
    return json.loads(out.stdout)


def test_delivery_time_beyond_the_maximum_is_refused(broker, producer):
    # a refused send is not a passing flow: the client logs each of its attempts as ERROR
    too_far = int(time.time()) + MAX_DELAY_S + 60
    with pytest.raises(BadRequestException) as err:
        producer.send(message("E2eFar", b"too far", deliver_s=too_far))
    assert err.value.code == rocketmq.grpc_protocol.Code.ILLEGAL_DELIVERY_TIME
    ms_by_mistake = int(time.time() * 1000) + 60_000  # the client's docstring says ms
    with pytest.raises(BadRequestException):
        producer.send(message("E2eFar", b"ms", deliver_s=ms_by_mistake))
    consumer = simple_consumer(broker, "GroupFar", "E2eFar", await_s=1)
    try:
        assert consumer.receive(16, 10) == []  # nothing of the refused sends was stored
    finally:
        consumer.shutdown()


def test_readme_snippet_runs(broker, clean_log, capsys):
    text = (ROOT / "docs" / "FRONTS.md").read_text(encoding="utf-8")
    block = text.split("<!-- grpc-snippet:start -->", 1)[1].split("<!-- grpc-snippet:end -->")[0]
    code = block.split("```python", 1)[1].split("```", 1)[0]
    exec(compile(code.replace("127.0.0.1:8081", broker.endpoint), "FRONTS.md", "exec"), {})
    out = capsys.readouterr().out
    assert "received b'close order 42' attempt 1" in out, out


def test_fifo_and_transactional_sends_answer_unsupported(broker):
    class Checker(TransactionChecker):
        def check(self, message):
            return TransactionResolution.ROLLBACK

    producer = Producer(config(broker.endpoint), ("E2eFifo",), Checker())
    producer.startup()
    try:
        fifo = message("E2eFifo", b"ordered")
        fifo.message_group = "order-42"
        with pytest.raises(UnsupportedException):
            producer.send(fifo)
        transaction = producer.begin_transaction()
        with pytest.raises(UnsupportedException):
            producer.send(message("E2eFifo", b"in a transaction"), transaction)
    finally:
        producer.shutdown()
