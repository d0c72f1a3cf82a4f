"""``RemotingService``: the request handlers over one Broker, and the state they share.

Every handler runs on the front's event loop; blocking broker calls go to a small thread pool
(``call``). A handler's failure becomes a RocketMQ response code with the reason as remark, never
a dropped request: bad input answers MESSAGE_ILLEGAL (sends) or INVALID_PARAMETER, a closed
broker SERVICE_NOT_AVAILABLE, anything else SYSTEM_ERROR; an unknown code answers
REQUEST_CODE_NOT_SUPPORTED. One port answers both the NameServer's GET_ROUTEINFO_BY_TOPIC and
the broker's requests, so a client's ``namesrvAddr`` can be this front.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from concurrent.futures import Executor

from rocks_timer.errors import InvalidMessageError, RocksTimerError, StoreClosedError
from rocks_timer.front_calls import BrokerCalls
from rocks_timer.recent_sends import RecentSends
from rocks_timer.remoting.admin import AdminHandlers, RateSampler
from rocks_timer.remoting.clients import ClientTable
from rocks_timer.remoting.codes import Request, Response
from rocks_timer.remoting.command import ONEWAY_FLAG, RemotingCommand
from rocks_timer.remoting.consuming import ConsumerHandlers, Poll
from rocks_timer.remoting.headers import Header, HeaderError
from rocks_timer.remoting.producing import BadRequest, ProducerHandlers
from rocks_timer.remoting.records import BodyError, ipv4
from rocks_timer.remoting.topics import TopicTable

log = logging.getLogger(__name__)
NOTIFY_DELAY_S = 0.3   # after the heartbeat's reply: a client ignores it before it runs
SEND_CODES = frozenset((Request.SEND_MESSAGE, Request.SEND_MESSAGE_V2,
                        Request.SEND_BATCH_MESSAGE))
# response codes that answer a request as asked (an empty pull, a group with no offset yet)
_ANSWERS = frozenset({Response.SUCCESS, Response.PULL_NOT_FOUND, Response.PULL_RETRY_IMMEDIATELY,
                      Response.PULL_OFFSET_MOVED, Response.QUERY_NOT_FOUND})


class RemotingService(ProducerHandlers, ConsumerHandlers, AdminHandlers):
    """The handlers and their shared state: topics, clients, held pulls, pending offsets."""

    def __init__(self, broker, executor: Executor, host: str, port: int, broker_name: str,
                 cluster: str):
        self.broker = broker
        self.calls = BrokerCalls.for_broker(broker, executor)
        self.host_bytes = ipv4(host)
        self.port = port
        self.address = f"{'.'.join(str(b) for b in self.host_bytes)}:{port}"
        self.broker_name = broker_name
        self.topics = TopicTable(broker_name, cluster, self.address, broker.topics(),
                                 broker.clock.now_ms())
        self.clients = ClientTable()
        self.recent = RecentSends()
        self.rates = RateSampler(broker)
        self.connections: set = set()
        self.polls: dict[object, set[Poll]] = {}     # connection -> its held pulls
        self.watched: dict[str, set[Poll]] = {}      # topic -> held pulls
        self.watched_topics: frozenset[str] = frozenset()
        self.pending_offsets: dict[tuple[str, str, int], int] = {}
        self.offsets_dirty = asyncio.Event()
        self.pulled = 0
        self.errors = 0
        self._opaque = itertools.count(1)
        # per request name since start, for the metrics endpoint; every key exists from the
        # start, so a reader on another thread never sees the dicts change size
        self.names = {code: name for name, code in vars(Request).items()
                      if not name.startswith("_")}
        self.requests = dict.fromkeys([*self.names.values(), "UNKNOWN"], 0)
        self.failures = dict.fromkeys(self.requests, 0)
        self.handlers = {
            Request.GET_ROUTEINFO_BY_TOPIC: self.route,
            Request.SEND_MESSAGE: self.send_message,
            Request.SEND_MESSAGE_V2: self.send_message,
            Request.SEND_BATCH_MESSAGE: self.send_message,
            Request.RECALL_MESSAGE: self.recall_message,
            Request.HEART_BEAT: self.heart_beat,
            Request.UNREGISTER_CLIENT: self.unregister_client,
            Request.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            Request.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            Request.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            Request.GET_MAX_OFFSET: self.max_offset,
            Request.GET_MIN_OFFSET: self.min_offset,
            Request.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            Request.PULL_MESSAGE: self.pull_message,
            Request.CONSUMER_SEND_MSG_BACK: self.send_back,
            Request.GET_BROKER_RUNTIME_INFO: self.runtime_info,
        }

    def now_ms(self) -> int:
        return self.broker.clock.now_ms()

    async def call(self, fn, *args, **kwargs):
        """A broker call on the pool; the hot, short ones use ``self.calls.short``."""
        return await self.calls.pool(fn, *args, **kwargs)

    # -- dispatch -------------------------------------------------------------------------
    async def handle(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        name = self.names.get(cmd.code, "UNKNOWN")
        self.requests[name] += 1
        response = await self._handle(conn, cmd)
        if response.code not in _ANSWERS:
            self.failures[name] += 1
        return response

    async def _handle(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        handler = self.handlers.get(cmd.code)
        if handler is None:
            return cmd.response(Response.REQUEST_CODE_NOT_SUPPORTED,
                                remark=f"request code {cmd.code} is not supported by rtimer")
        try:
            return await handler(conn, cmd)
        except Exception as exc:  # noqa: BLE001 - every failure is a response code
            return self.error_reply(cmd, exc)

    def error_reply(self, cmd: RemotingCommand, exc: Exception) -> RemotingCommand:
        """The answer to ``cmd`` that failed with ``exc``."""
        if isinstance(exc, BadRequest):
            return cmd.response(exc.code, remark=str(exc))
        if isinstance(exc, (HeaderError, BodyError, InvalidMessageError, ValueError)):
            code = Response.MESSAGE_ILLEGAL if cmd.code in SEND_CODES else \
                Response.INVALID_PARAMETER
            return cmd.response(code, remark=str(exc))
        if isinstance(exc, StoreClosedError):
            return cmd.response(Response.SERVICE_NOT_AVAILABLE, remark=str(exc))
        if isinstance(exc, RocksTimerError):
            return cmd.response(Response.SYSTEM_ERROR, remark=str(exc))
        self.errors += 1
        log.error("remoting request code %d failed", cmd.code, exc_info=exc)
        return cmd.response(Response.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")

    async def handle_sends(self, conn, cmds: list[RemotingCommand]) -> list[RemotingCommand]:
        """``handle`` for the send requests of one connection read together
        (``send_messages``): counted per request as ``handle`` counts them."""
        if len(cmds) == 1:
            return [await self.handle(conn, cmds[0])]
        for cmd in cmds:
            self.requests[self.names.get(cmd.code, "UNKNOWN")] += 1
        replies = await self.send_messages(cmds)
        for cmd, reply in zip(cmds, replies):
            if reply.code not in _ANSWERS:
                self.failures[self.names.get(cmd.code, "UNKNOWN")] += 1
        return replies

    def answer_now(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """``handle``'s answer to a send read alone, made without a coroutine when its store
        runs on the loop's thread at once (``BrokerCalls.can_run_now``, and no first send of the
        same messages still in progress); None otherwise, and then ``handle`` answers it. The
        same checks, store, dedup, counts and replies as ``handle`` (``send_message``), for the
        one-at-a-time client, whose reply latency is its send rate."""
        if not self.calls.can_run_now():
            return None
        try:
            messages = self._send_request(cmd)
        except Exception as exc:  # noqa: BLE001 - answered as handle answers it
            return self._counted(cmd, self.error_reply(cmd, exc))
        if not self.recent.settled(messages):
            return None
        try:
            results = self.recent.send_now(messages, self._store_now)
            reply = self._send_reply(cmd, messages, results)
        except Exception as exc:  # noqa: BLE001 - answered as handle answers it
            reply = self.error_reply(cmd, exc)
        return self._counted(cmd, reply)

    def _counted(self, cmd: RemotingCommand, reply: RemotingCommand) -> RemotingCommand:
        """``reply`` to ``cmd``, counted in the requests and failures as ``handle`` counts."""
        name = self.names.get(cmd.code, "UNKNOWN")
        self.requests[name] += 1
        if reply.code not in _ANSWERS:
            self.failures[name] += 1
        return reply

    async def route(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        topic = Header(cmd.ext).topic()
        self.topics.note(topic)
        return cmd.response(Response.SUCCESS, body=self.topics.route(topic))

    # -- held pulls -------------------------------------------------------------------------
    def open_poll(self, poll: Poll) -> None:
        self.polls.setdefault(poll.connection, set()).add(poll)
        watchers = self.watched.setdefault(poll.topic, set())
        watchers.add(poll)
        if len(watchers) == 1:
            self.watched_topics = frozenset(self.watched)

    def close_poll(self, poll: Poll) -> None:
        mine = self.polls.get(poll.connection)
        if mine is not None:
            mine.discard(poll)
            if not mine:
                del self.polls[poll.connection]
        watchers = self.watched.get(poll.topic)
        if watchers is not None:
            watchers.discard(poll)
            if not watchers:
                del self.watched[poll.topic]
                self.watched_topics = frozenset(self.watched)

    def arrived(self, topics: set[str]) -> None:
        """On the loop: wake the pulls held on ``topics``."""
        for topic in topics:
            for poll in self.watched.get(topic, ()):
                poll.wake.set()

    # -- clients ----------------------------------------------------------------------------
    def connection_closed(self, conn) -> None:
        self.connections.discard(conn)
        for poll in list(self.polls.get(conn, ())):
            poll.terminated = True
            poll.wake.set()
        for group in self.clients.drop_connection(conn):
            self.notify_later(group)

    def notify_later(self, group: str) -> None:
        asyncio.get_running_loop().call_later(NOTIFY_DELAY_S, self.notify, group)

    def notify(self, group: str) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED (oneway) to every client of ``group``: they rebalance."""
        for conn in self.clients.connections(group):
            conn.send(RemotingCommand(Request.NOTIFY_CONSUMER_IDS_CHANGED,
                                      opaque=next(self._opaque), flag=ONEWAY_FLAG,
                                      ext={"consumerGroup": group}))

    def expire_clients(self) -> None:
        for group in self.clients.expire(self.now_ms()):
            self.notify_later(group)


__all__ = ["RemotingService", "SEND_CODES"]
