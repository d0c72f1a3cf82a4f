"""Bad gRPC input answers a RocketMQ status (never a hang or a gRPC internal error) and never
stops the broker from serving others. Raw requests built with the official package's stubs."""
from __future__ import annotations

import base64
import secrets

import grpc
import pytest

from tests.support.grpc_support import TRANSPORTS, BrokerProcess
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc

Code = pb.Code
MAX_BODY = 64 * 1024


@pytest.fixture(scope="module", params=TRANSPORTS)
def broker(tmp_path_factory, request):
    """Both transports of the front (native HTTP/2, and grpcio)."""
    conf = tmp_path_factory.mktemp("bad-conf") / "broker.toml"
    conf.write_text(f"max_message_size = {MAX_BODY}\ncommitlog_segment_size = 1048576\n")
    proc = BrokerProcess(tmp_path_factory.mktemp("bad-data"), "--config", str(conf),
                         transport=request.param).start()
    yield proc
    output = proc.stop()
    assert "Traceback" not in output, output


@pytest.fixture(scope="module")
def stub(broker):
    channel = grpc.insecure_channel(broker.endpoint)
    yield service_pb2_grpc.MessagingServiceStub(channel)
    channel.close()


def new_id() -> str:
    return "01" + secrets.token_hex(16).upper()


def msg(topic="BadTopic", body=b"x", msg_id=None, **system) -> "pb.Message":
    m = pb.Message(body=body)
    m.topic.name = topic
    m.system_properties.message_id = msg_id or new_id()
    m.system_properties.message_type = system.pop("message_type", pb.NORMAL)
    m.system_properties.body_encoding = pb.IDENTITY
    for name, value in system.items():
        setattr(m.system_properties, name, value)
    return m


def send(stub, *messages):
    return stub.SendMessage(svc.SendMessageRequest(messages=list(messages)), timeout=10)


def receive(stub, group, topic, invisible_s=10, poll_s=0, expression="*", kind=pb.TAG,
            batch=16):
    request = svc.ReceiveMessageRequest(batch_size=batch)
    request.group.name = group
    request.message_queue.topic.name = topic
    request.filter_expression.type = kind
    request.filter_expression.expression = expression
    request.invisible_duration.seconds = invisible_s
    request.long_polling_timeout.seconds = poll_s
    responses = list(stub.ReceiveMessage(request, timeout=poll_s + 5))
    statuses = [r.status.code for r in responses if r.HasField("status")]
    return statuses, [r.message for r in responses if r.HasField("message")]


def ack(stub, group, topic, handle):
    request = svc.AckMessageRequest()
    request.group.name = group
    request.topic.name = topic
    request.entries.add(message_id=new_id(), receipt_handle=handle)
    return stub.AckMessage(request, timeout=10).status.code


def route(stub, topic):
    request = svc.QueryRouteRequest()
    request.topic.name = topic
    return stub.QueryRoute(request, timeout=10)


@pytest.mark.parametrize("topic", ["bad topic", "", "x" * 200, "rmq_sys_x", "SCHEDULE_TOPIC_XXXX"])
def test_bad_topic_names_answer_illegal_topic(stub, topic):
    assert route(stub, topic).status.code == Code.ILLEGAL_TOPIC
    assert send(stub, msg(topic=topic)).status.code == Code.ILLEGAL_TOPIC
    assert receive(stub, "G", topic)[0] == [Code.ILLEGAL_TOPIC]


def test_route_lists_a_read_write_queue_that_accepts_delay(stub):
    answer = route(stub, "FreshTopic")
    assert answer.status.code == Code.OK
    [queue] = answer.message_queues
    assert queue.broker.id == 0 and queue.permission == pb.READ_WRITE
    assert pb.DELAY in queue.accept_message_types


@pytest.mark.parametrize("message,code", [
    (msg(body=b"x" * (MAX_BODY + 1)), Code.MESSAGE_BODY_TOO_LARGE),
    (msg(body=b""), Code.MESSAGE_BODY_EMPTY),
    (msg(msg_id="not-an-id"), Code.ILLEGAL_MESSAGE_ID),
    (msg(tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
    (msg(message_group="g1", message_type=pb.FIFO), Code.UNSUPPORTED),
    (msg(message_type=pb.TRANSACTION), Code.UNSUPPORTED),
    (msg(priority=3), Code.UNSUPPORTED),
])
def test_bad_messages_answer_a_status_and_store_nothing(stub, message, code):
    assert send(stub, message).status.code == code


def test_reserved_property_names_and_far_delivery_times_are_refused(stub):
    reserved = msg()
    reserved.user_properties["REAL_TOPIC"] = "elsewhere"
    assert send(stub, reserved).status.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY
    far = msg()
    far.system_properties.delivery_timestamp.seconds = 10 ** 12
    assert send(stub, far).status.code == Code.ILLEGAL_DELIVERY_TIME
    assert stub.SendMessage(svc.SendMessageRequest(), timeout=10).status.code == Code.BAD_REQUEST


def test_junk_recall_handles_answer_bad_request(stub):
    for handle in ("", "junk!", base64.urlsafe_b64encode(b"v1 Other 1 " + b"A" * 32).decode()):
        request = svc.RecallMessageRequest(recall_handle=handle)
        request.topic.name = "BadTopic"
        assert stub.RecallMessage(request, timeout=10).status.code == Code.BAD_REQUEST


def test_bad_receive_requests_answer_a_status(stub):
    assert receive(stub, "bad group!", "BadTopic")[0] == [Code.ILLEGAL_CONSUMER_GROUP]
    assert receive(stub, "G", "BadTopic", kind=pb.SQL, expression="a > 1")[0] == [
        Code.UNSUPPORTED]
    assert receive(stub, "G", "BadTopic", invisible_s=0)[0] == [Code.ILLEGAL_INVISIBLE_TIME]
    assert receive(stub, "G", "BadTopic", batch=100_000)[0] == [Code.BAD_REQUEST]


def test_junk_and_foreign_receipt_handles_answer_invalid_receipt_handle(stub):
    assert send(stub, msg(topic="AckTopic", body=b"mine")).status.code == Code.OK
    statuses, [got] = receive(stub, "Owner", "AckTopic")
    assert statuses == [Code.OK]
    handle = got.system_properties.receipt_handle
    for junk in ("", "%%%", "cjEgZ2FyYmFnZQ", base64.urlsafe_b64encode(b"r1 a b 1 2 3").decode()):
        assert ack(stub, "Owner", "AckTopic", junk) == Code.INVALID_RECEIPT_HANDLE
    assert ack(stub, "Thief", "AckTopic", handle) == Code.INVALID_RECEIPT_HANDLE  # wrong group
    assert ack(stub, "Owner", "OtherTopic", handle) == Code.INVALID_RECEIPT_HANDLE
    change = svc.ChangeInvisibleDurationRequest(receipt_handle="junk")
    change.group.name, change.topic.name = "Owner", "AckTopic"
    change.invisible_duration.seconds = 10
    assert stub.ChangeInvisibleDuration(change, timeout=10).status.code == \
        Code.INVALID_RECEIPT_HANDLE
    assert ack(stub, "Owner", "AckTopic", handle) == Code.OK  # the rightful owner still can
    assert ack(stub, "Owner", "AckTopic", handle) == Code.INVALID_RECEIPT_HANDLE  # once


def test_unsupported_rpcs_answer_a_status(stub):
    assert stub.EndTransaction(svc.EndTransactionRequest(), timeout=10).status.code == \
        Code.UNSUPPORTED
    [pulled] = list(stub.PullMessage(svc.PullMessageRequest(), timeout=10))
    assert pulled.status.code == Code.UNSUPPORTED


def test_a_retried_send_with_the_same_id_is_stored_once(stub):
    same = new_id()
    for _ in range(3):
        answer = send(stub, msg(topic="DedupTopic", body=b"once", msg_id=same))
        assert answer.status.code == Code.OK and answer.entries[0].message_id == same
    statuses, got = receive(stub, "DedupGroup", "DedupTopic")
    assert [m.system_properties.message_id for m in got] == [same]


def test_garbage_bytes_fail_that_call_only(broker, stub):
    # a request that is not protobuf at all: gRPC itself refuses it, the server keeps going
    with grpc.insecure_channel(broker.endpoint) as channel:
        garbage = channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage",
                                      request_serializer=lambda b: b,
                                      response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError):
            garbage(b"\xff\xff\xff\xff\x0f", timeout=10)
    assert send(stub, msg(topic="AfterGarbage", body=b"still fine")).status.code == Code.OK
    assert receive(stub, "AfterGarbageGroup", "AfterGarbage")[0] == [Code.OK]


@pytest.mark.parametrize("key", ["a b", "", "esc\x1b[2J", "tab\tkey"])
def test_keys_find_refuses_answer_illegal_message_key(stub, key):
    """The library's key rule (routing.validate_key), as find applies it."""
    bad = msg(topic="KeyTopic")
    bad.system_properties.keys.extend(["fine", key])
    assert send(stub, bad).status.code == Code.ILLEGAL_MESSAGE_KEY
    assert receive(stub, "KeyGroup", "KeyTopic")[0] == [Code.MESSAGE_NOT_FOUND]
