"""``MessagingService``: the ``apache.rocketmq.v2.MessagingService`` handlers over one Broker.

Every handler answers a RocketMQ status and never lets an exception reach gRPC (which would be
an UNKNOWN error the clients do not map). Broker calls run through ``BrokerCalls``: on the
loop's thread when short and nothing waits, else on a small thread pool (front_calls.py);
long polls wait on an asyncio event that the CommitLog writer sets when a message lands on a
watched topic, and end before the client's deadline.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from contextlib import aclosing
from concurrent.futures import Executor
from typing import Any, Callable

from rocks_timer.front_calls import BrokerCalls
from rocks_timer.pop import DEFAULT_MAX_ATTEMPTS, PopService
from rocks_timer.proxy import convert, settings as settings_mod
from rocks_timer.recent_sends import RecentSends
from rocks_timer.proxy.limits import CALLS, STREAMS, PeerLimits
from rocks_timer.proxy.protocol import Code, pb, service_pb2_grpc, svc
from rocks_timer.proxy.status import ProxyError, from_exception, ok, status
from rocks_timer.timer.handles import Handle

import grpc  # after protocol, which says which extra to install when it is missing

log = logging.getLogger(__name__)
DEFAULT_INVISIBLE_MS = 60_000       # auto-renewing (push) consumers do not give one
MAX_LONG_POLL_MS = 60_000
DEADLINE_MARGIN_S = 0.5             # a long poll ends this long before the client gives up
MAX_BATCH = 1024
TERMINATION_WAIT_S = 1.0


class _Poll:
    """One ReceiveMessage in progress: woken by arrivals, ended early by the client's end."""

    __slots__ = ("wake", "closed", "terminated")

    def __init__(self) -> None:
        self.wake = asyncio.Event()
        self.closed = asyncio.Event()
        self.terminated = False


def _client_id(context) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "x-mq-client-id":
            return str(value)[:256]
    return ""


def answers(response: Callable[..., Any], handle_code: int = Code.INVALID_RECEIPT_HANDLE,
            limited: bool = True):
    """Turn any exception of a unary handler into ``response(status=...)``, and answer
    TOO_MANY_REQUESTS at once to a connection holding its limit of calls (``PeerLimits``;
    ``limited=False``: a call that must get through to end the others, as a termination)."""
    kind = CALLS if limited else None

    def wrap(handler):
        name = handler.__name__

        @functools.wraps(handler)
        async def run(self, request, context):
            # counted on the front's event loop thread: no lock (the metrics read copies)
            requests = self.requests
            requests[name] = requests.get(name, 0) + 1
            limits = self.limits
            peer = context.peer() if kind is not None else None
            if kind is not None and not limits.take(peer, kind):
                self.errors[name] = self.errors.get(name, 0) + 1  # refused at once: failed
                return response(status=status(Code.TOO_MANY_REQUESTS, limits.refusal(CALLS)))
            try:
                return await handler(self, request, context)
            except Exception as exc:  # noqa: BLE001 - every failure is a RocketMQ status
                self.errors[name] = self.errors.get(name, 0) + 1
                return response(status=from_exception(exc, handle_code))
            finally:
                if kind is not None:
                    limits.release(peer, kind)
        return run
    return wrap


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    """The RPCs of the RocketMQ proxy protocol that rocks-timer serves."""

    def __init__(self, broker, pop: PopService, executor: Executor, endpoints: "pb.Endpoints",
                 queue_count: int = 1, metrics: bool = False, limits: PeerLimits | None = None):
        self.broker = broker
        self.limits = limits or PeerLimits()  # per client connection (ARCHITECTURE §4)
        self.pop = pop
        self.calls = BrokerCalls.for_broker(broker, executor)
        self.endpoints = endpoints
        self.queue_count = queue_count
        self.metrics = metrics  # the broker takes client metrics (see metrics_sink)
        self.host = endpoints.addresses[0].host if endpoints.addresses else ""
        self.recent = RecentSends()
        self.requests: dict[str, int] = {}  # per unary RPC (``answers``)
        self.errors: dict[str, int] = {}  # of those, the ones answered with a failure status
        self.max_attempts: dict[str, int] = {}
        self.polls: dict[str, set[_Poll]] = {}  # client id -> its long polls in progress

    # -- routes, settings, heartbeats ----------------------------------------------------------
    def _endpoints(self, request_endpoints: "pb.Endpoints") -> "pb.Endpoints":
        return request_endpoints if request_endpoints.addresses else self.endpoints

    def _queue(self, topic: "pb.Resource", queue_id: int, endpoints) -> "pb.MessageQueue":
        queue = pb.MessageQueue(id=queue_id, permission=pb.READ_WRITE,
                                accept_message_types=[pb.NORMAL, pb.FIFO, pb.DELAY,
                                                      pb.TRANSACTION])
        queue.topic.CopyFrom(topic)
        queue.broker.name = "rtimer"
        queue.broker.id = 0
        queue.broker.endpoints.CopyFrom(endpoints)
        return queue

    @answers(svc.QueryRouteResponse)
    async def QueryRoute(self, request, context):
        convert.topic_name(request.topic)
        endpoints = self._endpoints(request.endpoints)
        return svc.QueryRouteResponse(status=ok(), message_queues=[
            self._queue(request.topic, i, endpoints) for i in range(self.queue_count)])

    @answers(svc.QueryAssignmentResponse)
    async def QueryAssignment(self, request, context):
        convert.topic_name(request.topic)
        convert.group_name(request.group)
        queue = self._queue(request.topic, 0, self._endpoints(request.endpoints))
        return svc.QueryAssignmentResponse(status=ok(),
                                           assignments=[pb.Assignment(message_queue=queue)])

    @answers(svc.HeartbeatResponse)
    async def Heartbeat(self, request, context):
        if request.HasField("group"):
            convert.group_name(request.group)
        return svc.HeartbeatResponse(status=ok())

    @answers(svc.NotifyClientTerminationResponse, limited=False)
    async def NotifyClientTermination(self, request, context):
        """End the client's long polls first (empty), and answer once their streams are
        closed: the client closes its channels right after this answer, and a poll cut off
        by that is logged as an error by the official client."""
        client = _client_id(context)
        polls = list(self.polls.get(client, ())) if client else []
        for poll in polls:
            poll.terminated = True
            poll.wake.set()
        if polls:
            waits = [asyncio.ensure_future(p.closed.wait()) for p in polls]
            _, late = await asyncio.wait(waits, timeout=TERMINATION_WAIT_S)
            for waiting in late:
                waiting.cancel()
        return svc.NotifyClientTerminationResponse(status=ok())

    async def Telemetry(self, request_iterator, context):
        """Answer each settings command with the server's settings; other commands (thread
        dumps, verify results) need no answer. The stream stays open until the client ends it;
        a connection already holding its limit of streams is refused (RESOURCE_EXHAUSTED)."""
        with self.limits.hold(context.peer(), STREAMS) as admitted:
            if not admitted:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    self.limits.refusal(STREAMS))
            async with aclosing(self._telemetry(request_iterator)) as replies:
                async for reply in replies:
                    yield reply

    async def _telemetry(self, request_iterator):
        async for command in request_iterator:
            if not command.HasField("settings"):
                continue
            try:
                reply = settings_mod.reply(command.settings, self.broker.config,
                                           self.endpoints if self.metrics else None)
                group = command.settings.subscription.group.name
                if group:
                    self.max_attempts[group] = reply.backoff_policy.max_attempts
                yield svc.TelemetryCommand(status=ok(), settings=reply)
            except Exception as exc:  # noqa: BLE001 - a bad command never ends the stream
                yield svc.TelemetryCommand(status=from_exception(exc))

    # -- producing -------------------------------------------------------------------------------
    @answers(svc.SendMessageResponse)
    async def SendMessage(self, request, context):
        if not request.messages:
            raise ProxyError(Code.BAD_REQUEST, "SendMessage carries no message")
        if len(request.messages) > MAX_BATCH:
            raise ProxyError(Code.BAD_REQUEST, f"more than {MAX_BATCH} messages in one send")
        max_body = self.broker.config.max_message_size
        messages = [convert.from_proto(m, max_body) for m in request.messages]
        results = await self.recent.send(messages, self._store)
        done = ok()
        response = svc.SendMessageResponse(status=done)
        add = response.entries.add
        for msg, result in zip(messages, results):
            add(status=done, message_id=convert.client_id(msg), offset=0,
                recall_handle=result.handle or "")
        return response

    async def _store(self, messages):
        return await self.calls.short(self.broker.send_batch, messages)

    @answers(svc.RecallMessageResponse)
    async def RecallMessage(self, request, context):
        topic = convert.topic_name(request.topic)
        try:
            handle = Handle.decode(request.recall_handle)
        except ValueError as exc:
            raise ProxyError(Code.BAD_REQUEST, f"recall handle is malformed: {exc}") from None
        if handle.topic != topic:
            raise ProxyError(Code.BAD_REQUEST, f"recall handle belongs to topic {handle.topic!r}"
                             f", not {topic!r}")
        if not await self.calls.short(self.broker.cancel, request.recall_handle):
            raise ProxyError(Code.NOT_FOUND, "nothing to recall: the message was delivered, "
                             "is being delivered, or was recalled already")
        return svc.RecallMessageResponse(status=ok(), message_id="01" + handle.msg_id)

    @answers(svc.EndTransactionResponse)
    async def EndTransaction(self, request, context):
        raise ProxyError(Code.UNSUPPORTED, "transactions are not supported by rocks-timer")

    # -- consuming -------------------------------------------------------------------------------
    async def ReceiveMessage(self, request, context):
        """One generator for the whole stream (a wrapping generator cost a step per message):
        its ``finally`` ends the poll and frees the connection's call slot as soon as the
        stream ends or is cancelled."""
        limits, peer = self.limits, context.peer()
        if not limits.take(peer, CALLS):
            yield svc.ReceiveMessageResponse(status=status(Code.TOO_MANY_REQUESTS,
                                                           limits.refusal(CALLS)))
            return
        poll = _Poll()
        client = _client_id(context)
        self.polls.setdefault(client, set()).add(poll)
        try:
            try:
                messages, wait_status = await self._receive(request, context, poll)
            except Exception as exc:  # noqa: BLE001 - every failure is a RocketMQ status
                yield svc.ReceiveMessageResponse(status=from_exception(exc))
                return
            if not messages:
                yield svc.ReceiveMessageResponse(status=wait_status)
                return
            yield svc.ReceiveMessageResponse(status=ok())
            namespace, host = request.group.resource_namespace, self.host
            for popped in messages:
                response = svc.ReceiveMessageResponse()
                convert.fill_message(response.message, popped, namespace, host)
                yield response
            # the push consumer measures its receive latency from this (and fails without it)
            yield svc.ReceiveMessageResponse(
                delivery_timestamp=convert.timestamp(self.broker.clock.now_ms()))
        finally:
            poll.closed.set()
            mine = self.polls.get(client)
            if mine is not None:
                mine.discard(poll)
                if not mine:
                    del self.polls[client]
            limits.release(peer, CALLS)

    async def _receive(self, request, context, poll: "_Poll"):
        group = convert.group_name(request.group)
        topic = convert.topic_name(request.message_queue.topic)
        tags = settings_mod.tag_filter(request.filter_expression)
        batch = request.batch_size or 32
        if not 1 <= batch <= MAX_BATCH:
            raise ProxyError(Code.BAD_REQUEST, f"batch_size {batch} is outside 1..{MAX_BATCH}")
        invisible_ms = _duration_ms(request.invisible_duration) if request.HasField(
            "invisible_duration") else DEFAULT_INVISIBLE_MS
        self.pop.check_invisible(invisible_ms)
        poll_ms = min(_duration_ms(request.long_polling_timeout), MAX_LONG_POLL_MS)
        remaining = context.time_remaining()
        if remaining is not None:
            poll_ms = max(0, min(poll_ms, int((remaining - DEADLINE_MARGIN_S) * 1000)))
        max_attempts = self.max_attempts.get(group, DEFAULT_MAX_ATTEMPTS)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + poll_ms / 1000
        token = self.pop.watch(self.pop.watched_topics(group, topic),
                               lambda: loop.call_soon_threadsafe(poll.wake.set))
        try:
            while not poll.terminated:
                poll.wake.clear()
                found = await self.calls.short(self.pop.pop, group, topic, batch, invisible_ms,
                                               tags, max_attempts)
                left = deadline - loop.time()
                if found or left <= 0:
                    return found, status(Code.MESSAGE_NOT_FOUND, "no new message")
                try:
                    await asyncio.wait_for(poll.wake.wait(), left)
                except asyncio.TimeoutError:
                    pass
            return [], status(Code.MESSAGE_NOT_FOUND, "the client is shutting down")
        finally:
            self.pop.unwatch(token)

    @answers(svc.AckMessageResponse)
    async def AckMessage(self, request, context):
        group = convert.group_name(request.group)
        topic = convert.topic_name(request.topic)
        if not 1 <= len(request.entries) <= MAX_BATCH:
            raise ProxyError(Code.BAD_REQUEST, f"AckMessage carries {len(request.entries)} "
                             f"entries; 1..{MAX_BATCH} are accepted")
        response = svc.AckMessageResponse()
        add = response.entries.add
        failed = None
        for entry in request.entries:
            handle = entry.receipt_handle
            try:
                await self.calls.short(self.pop.ack, group, topic, handle)
                result = ok()
            except Exception as exc:  # noqa: BLE001 - reported per entry and at the top
                result = from_exception(exc)
                failed = failed or result
            add(message_id=entry.message_id, receipt_handle=handle, status=result)
        response.status.CopyFrom(failed or ok())
        return response

    @answers(svc.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(self, request, context):
        group = convert.group_name(request.group)
        topic = convert.topic_name(request.topic)
        handle = await self.calls.short(self.pop.change_invisible, group, topic,
                                        request.receipt_handle,
                                        _duration_ms(request.invisible_duration),
                                        self.max_attempts.get(group, DEFAULT_MAX_ATTEMPTS))
        return svc.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=handle)

    @answers(svc.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(self, request, context):
        raise ProxyError(Code.UNSUPPORTED, "forwarding to the dead-letter queue is done by "
                         "the broker when a message runs out of attempts")

    async def PullMessage(self, request, context):
        yield svc.PullMessageResponse(status=status(Code.UNSUPPORTED,
                                                    "PullMessage is not supported"))

    @answers(svc.UpdateOffsetResponse)
    async def UpdateOffset(self, request, context):
        raise ProxyError(Code.UNSUPPORTED, "UpdateOffset is not supported")

    @answers(svc.GetOffsetResponse)
    async def GetOffset(self, request, context):
        raise ProxyError(Code.UNSUPPORTED, "GetOffset is not supported")

    @answers(svc.QueryOffsetResponse)
    async def QueryOffset(self, request, context):
        raise ProxyError(Code.UNSUPPORTED, "QueryOffset is not supported")

    @answers(svc.SyncLiteSubscriptionResponse)
    async def SyncLiteSubscription(self, request, context):
        raise ProxyError(Code.UNSUPPORTED, "lite topics are not supported by rocks-timer")


def _duration_ms(duration) -> int:
    return max(0, duration.seconds * 1000 + duration.nanos // 1_000_000)


__all__ = ["MessagingService"]
