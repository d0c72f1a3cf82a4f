"""One client connection cannot lock the others out of the gRPC front (issue #30: 1,000 idle
Telemetry streams from one client took every slot of the server). A real ``rtimer run`` with
the front, and the real grpc client (grpc.aio, with the official package's stubs): one channel
opens many idle Telemetry streams, or many long polls; past the per-connection limit they are
refused at once, and a second client still sends and receives."""
from __future__ import annotations

import asyncio
import secrets

import grpc
import pytest

from tests.support.grpc_support import TRANSPORTS, BrokerProcess
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc
from rocks_timer.proxy.limits import MAX_CALLS_PER_PEER, MAX_STREAMS_PER_PEER

Code = pb.Code
STREAMS = 1_000
POLLS = MAX_CALLS_PER_PEER + 40
DEADLINE_S = 60.0
# channels of one process to one target share a connection unless told not to: each client of
# these tests gets its own, as two client processes would
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


@pytest.fixture(scope="module", params=TRANSPORTS)
def broker(tmp_path_factory, request):
    """Both transports of the front (native HTTP/2, and grpcio)."""
    proc = BrokerProcess(tmp_path_factory.mktemp("limits-data"), transport=request.param).start()
    yield proc
    output = proc.stop()
    assert "Traceback" not in output, output


def message(topic: str, body: bytes) -> "pb.Message":
    m = pb.Message(body=body)
    m.topic.name = topic
    m.system_properties.message_id = "01" + secrets.token_hex(16).upper()
    m.system_properties.message_type = pb.NORMAL
    m.system_properties.body_encoding = pb.IDENTITY
    return m


def receive_request(topic: str, group: str, poll_s: int) -> "svc.ReceiveMessageRequest":
    request = svc.ReceiveMessageRequest(batch_size=16)
    request.group.name = group
    request.message_queue.topic.name = topic
    request.filter_expression.type = pb.TAG
    request.filter_expression.expression = "*"
    request.invisible_duration.seconds = 30
    request.long_polling_timeout.seconds = poll_s
    return request


async def send_and_receive(stub, topic: str) -> None:
    """What every client must still be able to do: send, then receive what it sent."""
    body = secrets.token_bytes(16)
    sent = await stub.SendMessage(svc.SendMessageRequest(messages=[message(topic, body)]),
                                  timeout=10)
    assert sent.status.code == Code.OK, sent.status
    got = []
    async for response in stub.ReceiveMessage(receive_request(topic, "Other", 5), timeout=15):
        if response.HasField("message"):
            got.append(response.message.body)
    assert got == [body]


async def wait_until(condition) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not condition():
        assert loop.time() < deadline, "the front did not answer the excess in time"
        await asyncio.sleep(0.05)


def test_idle_telemetry_streams_of_one_channel_do_not_lock_others_out(broker):
    async def run() -> None:
        async with grpc.aio.insecure_channel(broker.endpoint, options=OWN_CONNECTION) as hog, \
                grpc.aio.insecure_channel(broker.endpoint, options=OWN_CONNECTION) as other:
            hog_stub = service_pb2_grpc.MessagingServiceStub(hog)
            streams = [hog_stub.Telemetry() for _ in range(STREAMS)]  # idle: never written to
            refused = [0]

            async def outcome(call) -> None:
                if await call.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    refused[0] += 1
            watchers = [asyncio.ensure_future(outcome(call)) for call in streams]
            await wait_until(lambda: refused[0] == STREAMS - MAX_STREAMS_PER_PEER)
            await send_and_receive(service_pb2_grpc.MessagingServiceStub(other), "LimitsA")
            await send_and_receive(hog_stub, "LimitsB")  # its calls are counted apart
            assert sum(not call.done() for call in streams) == MAX_STREAMS_PER_PEER
            for call in streams:
                call.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
    asyncio.run(run())


def test_long_polls_of_one_channel_past_its_limit_answer_too_many_requests(broker):
    async def run() -> None:
        async with grpc.aio.insecure_channel(broker.endpoint, options=OWN_CONNECTION) as hog, \
                grpc.aio.insecure_channel(broker.endpoint, options=OWN_CONNECTION) as other:
            hog_stub = service_pb2_grpc.MessagingServiceStub(hog)
            hog_id = (("x-mq-client-id", "hog-1"),)
            calls = [hog_stub.ReceiveMessage(receive_request("Quiet", "Hog", 30), timeout=60,
                                             metadata=hog_id) for _ in range(POLLS)]
            statuses: list[int] = []

            async def first_status(call) -> None:
                async for response in call:
                    if response.HasField("status"):
                        statuses.append(response.status.code)
                        return
            readers = [asyncio.ensure_future(first_status(call)) for call in calls]
            await wait_until(lambda: len(statuses) == POLLS - MAX_CALLS_PER_PEER)
            assert set(statuses) == {Code.TOO_MANY_REQUESTS}
            await send_and_receive(service_pb2_grpc.MessagingServiceStub(other), "LimitsC")
            # at its limit, the client can still end its polls: termination is not counted
            request = svc.NotifyClientTerminationRequest()
            request.group.name = "Hog"
            ended = await hog_stub.NotifyClientTermination(request, timeout=10, metadata=hog_id)
            assert ended.status.code == Code.OK
            await asyncio.wait_for(asyncio.gather(*readers), 10)  # not their 30 s
            assert statuses.count(Code.MESSAGE_NOT_FOUND) == MAX_CALLS_PER_PEER
    asyncio.run(run())
