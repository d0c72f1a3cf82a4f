"""The gRPC front's handlers driven directly (no transport) on a real broker: what each answers
per entry, that the shared OK status stays OK, and that a receive stream frees its connection's
call slot and its poll as soon as it is cancelled."""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from rocks_timer.pop import PopService
from rocks_timer.proxy import convert
from rocks_timer.proxy.protocol import Code, pb, svc
from rocks_timer.proxy.service import MessagingService
from rocks_timer.proxy.status import ok

PEER = "ipv4:127.0.0.1:40000"


class Context:
    def __init__(self, client_id: str = "test-client", deadline_s: float = 10.0):
        self._metadata = (("x-mq-client-id", client_id),)
        self._deadline_s = deadline_s

    def peer(self) -> str:
        return PEER

    def invocation_metadata(self):
        return self._metadata

    def time_remaining(self) -> float:
        return self._deadline_s

    async def abort(self, code, details):
        raise AssertionError(f"aborted: {code} {details}")


@pytest.fixture
def service(make_broker):
    broker = make_broker("rocksdb")
    pop = PopService(broker)
    endpoints = pb.Endpoints(scheme=pb.IPv4)
    endpoints.addresses.add(host="127.0.0.1", port=8081)
    with ThreadPoolExecutor(2) as executor:
        yield MessagingService(broker, pop, executor, endpoints)
    pop.close()


def send_request(i: int) -> svc.SendMessageRequest:
    req = svc.SendMessageRequest()
    msg = req.messages.add()
    msg.topic.name = "T"
    msg.body = b"body %d" % i
    msg.system_properties.message_id = f"01{i:032X}"
    msg.system_properties.message_type = pb.NORMAL
    return req


def receive_request(poll_s: int = 0) -> svc.ReceiveMessageRequest:
    req = svc.ReceiveMessageRequest()
    req.group.name = "G"
    req.message_queue.topic.name = "T"
    req.batch_size = 32
    req.invisible_duration.seconds = 30
    req.long_polling_timeout.seconds = poll_s
    return req


async def receive(service, poll_s: int = 0) -> list[pb.Message]:
    return [r.message async for r in service.ReceiveMessage(receive_request(poll_s), Context())
            if r.HasField("message")]


def test_an_ack_of_several_entries_answers_each_with_its_own_status(service):
    async def run():
        for i in range(3):
            sent = await service.SendMessage(send_request(i), Context())
            assert sent.status.code == Code.OK
            assert [e.status.code for e in sent.entries] == [Code.OK]
            assert sent.entries[0].message_id == f"01{i:032X}"
        got = await receive(service)
        assert len(got) == 3
        req = svc.AckMessageRequest()
        req.group.name, req.topic.name = "G", "T"
        for i, message in enumerate(got):
            entry = req.entries.add()
            entry.message_id = message.system_properties.message_id
            entry.receipt_handle = message.system_properties.receipt_handle
            if i == 1:
                bad = req.entries.add()
                bad.message_id, bad.receipt_handle = "01" + "F" * 32, "not-a-handle"
        answer = await service.AckMessage(req, Context())
        codes = [e.status.code for e in answer.entries]
        assert codes == [Code.OK, Code.OK, Code.INVALID_RECEIPT_HANDLE, Code.OK]
        assert answer.status.code == Code.INVALID_RECEIPT_HANDLE  # the first failure
        assert [e.receipt_handle for e in answer.entries] == [e.receipt_handle
                                                               for e in req.entries]
        again = await service.AckMessage(req, Context())  # acked already: expired, each
        assert {e.status.code for e in again.entries} == {Code.INVALID_RECEIPT_HANDLE}
        assert await receive(service) == []
        # every response copied the shared OK status; none changed it
        answer.entries[0].status.code = Code.INTERNAL_SERVER_ERROR
        assert (ok().code, ok().message) == (Code.OK, "OK")
    asyncio.run(run())


def test_a_received_message_carries_what_was_sent(service):
    async def run():
        await service.SendMessage(send_request(7), Context())
        [got] = await receive(service)
        assert got.body == b"body 7" and got.topic.name == "T"
        assert got.system_properties.message_id == f"01{7:032X}"
        assert got.system_properties.delivery_attempt == 1
        assert got.system_properties.invisible_duration.seconds == 30
        assert service.pop.stats()["popped"] == 1
    asyncio.run(run())


def test_a_cancelled_long_poll_frees_its_call_slot_and_its_poll_at_once(service):
    async def run():
        stream = service.ReceiveMessage(receive_request(poll_s=20), Context("poller"))
        first = asyncio.ensure_future(stream.__anext__())
        for _ in range(100):
            await asyncio.sleep(0.01)
            if service.limits.stats()["calls"] == 1 and service.polls:
                break
        assert service.limits.stats()["calls"] == 1 and list(service.polls) == ["poller"]
        first.cancel()  # what the server does when the client goes away
        with pytest.raises(asyncio.CancelledError):
            await first
        assert service.limits.stats()["calls"] == 0
        assert service.polls == {}
    asyncio.run(run())


def test_fill_message_writes_what_to_proto_returns(service):
    async def run():
        await service.SendMessage(send_request(3), Context())
        [popped] = service.pop.pop("G", "T", 1, 30_000)
        response = svc.ReceiveMessageResponse()
        convert.fill_message(response.message, popped, "ns", "127.0.0.1")
        assert response.message == convert.to_proto(popped, "ns", "127.0.0.1")
        assert response.message.topic.resource_namespace == "ns"
    asyncio.run(run())
