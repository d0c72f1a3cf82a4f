"""Consumer requests: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
QUERY/UPDATE_CONSUMER_OFFSET (14/15), offset lookups (29/30/31), PULL_MESSAGE (11) and
CONSUMER_SEND_MSG_BACK (36).

Pulls read the library's queues (``Broker.pull_batch``: one page in one buffer, its records
copied whole in the clients' layout; ``Broker.pull_page`` when a tag filter looks at each); a pull with nothing to read and the
suspend bit set is held until a message lands on its topic or ``suspendTimeoutMillis`` ends.
Offsets are the library's consumer offsets (``<data>/config/consumerOffset.json``): an
UPDATE_CONSUMER_OFFSET is written before it is answered (clients send it on shutdown), the
offsets piggybacked on pulls are written once a second.

A send-back follows RocketMQ's rules: the message is stored again on ``%RETRY%<group>`` at delay
level ``3 + reconsumeTimes`` (or the level the client asked for) with ``reconsumeTimes + 1`` and
``RETRY_TOPIC`` = the topic it was first consumed from; once ``reconsumeTimes`` reaches the
maximum (16 unless the client says) it goes to ``%DLQ%<group>`` instead.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from rocks_timer.errors import CorruptRecordError
from rocks_timer.message import (BROKER_OWNED_PROPERTIES, DELAY, TIMER_PROPERTIES, Message,
                                 is_system_topic)
from rocks_timer.remoting.clients import parse_tags
from rocks_timer.remoting.codes import Response
from rocks_timer.remoting.command import RemotingCommand
from rocks_timer.remoting.headers import Header, HeaderError, check_name
from rocks_timer.remoting.producing import DEFAULT_MAX_RECONSUME_TIMES, BadRequest
from rocks_timer.remoting.records import (encode_for_client, encode_page_for_client,
                                          offset_msg_id)
from rocks_timer.remoting.topics import DLQ_PREFIX, RETRY_PREFIX, queue_count

MAX_PULL_MESSAGES = 1024
MAX_PULL_BYTES = 8 * 1024 * 1024
MAX_SUSPEND_MS = 30_000          # held polls end before the clients' 30 s pull timeout
FILTER_BUDGET = 4096             # queue entries a pull looks at for a matching tag
RETRY_TOPIC = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
MAX_DELAY_LEVEL_FROM_CLIENT = 1_000


@dataclass
class PullResult:
    code: int
    next_offset: int
    min_offset: int
    max_offset: int
    body: bytes = b""


class Poll:
    """One held pull: woken by arrivals on its topic, ended early by its client's unregister."""

    __slots__ = ("topic", "group", "connection", "wake", "terminated")

    def __init__(self, topic: str, group: str, connection):
        self.topic, self.group, self.connection = topic, group, connection
        self.wake = asyncio.Event()
        self.terminated = False


class ConsumerHandlers:
    """Mixed into ``RemotingService``: the consumer side."""

    # -- clients ----------------------------------------------------------------------------
    async def heart_beat(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        try:
            doc = json.loads(cmd.body.decode("utf-8")) if cmd.body else {}
        except (UnicodeDecodeError, ValueError) as exc:
            raise HeaderError(f"the heartbeat body is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise HeaderError("the heartbeat body is not a JSON object")
        client_id = str(doc.get("clientID") or "")[:256]
        groups: dict[str, dict] = {}
        for consumer in doc.get("consumerDataSet") or []:
            if not isinstance(consumer, dict):
                continue
            group = check_name(str(consumer.get("groupName", "")), "group")
            subscriptions = {}
            for sub in consumer.get("subscriptionDataSet") or []:
                if not isinstance(sub, dict):
                    continue
                topic = check_name(str(sub.get("topic", "")), "topic")
                self.topics.note(topic)
                subscriptions[topic] = parse_tags(str(sub.get("subString") or "*"))
            self.topics.note(RETRY_PREFIX + group)
            groups[group] = subscriptions
        if groups:
            changed = self.clients.heartbeat(client_id, conn, self.now_ms(), groups)
            for group in changed:
                self.notify_later(group)
        return cmd.response(Response.SUCCESS)

    async def unregister_client(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        header = Header(cmd.ext)
        client_id = header.text("clientID", "")
        group = cmd.ext.get("consumerGroup") or ""
        if group:
            # answer the group's held pulls on this connection now: the client frees its
            # consumer right after this reply
            for poll in list(self.polls.get(conn, ())):
                if poll.group == group:
                    poll.terminated = True
                    poll.wake.set()
            if self.clients.unregister(client_id, group):
                self.notify_later(group)
        return cmd.response(Response.SUCCESS)

    async def consumer_list(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        group = Header(cmd.ext).group("consumerGroup")
        ids = self.clients.client_ids(group)
        if not ids:
            return cmd.response(Response.SYSTEM_ERROR, remark=f"no consumer of group {group} "
                                "is connected")
        body = json.dumps({"consumerIdList": ids}).encode("utf-8")
        return cmd.response(Response.SUCCESS, body=body)

    # -- offsets ----------------------------------------------------------------------------
    async def query_consumer_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        header = Header(cmd.ext)
        group, topic, queue_id = header.group("consumerGroup"), header.topic(), header.queue_id()
        offset = self.pending_offsets.get((topic, group, queue_id))
        if offset is None:
            offset = await self.call(self.broker.consumer_offsets.find, topic, group, queue_id)
        if offset is None:
            # a group new to this queue starts at its beginning while that is still the first
            # message ever stored there (a RocketMQ broker does so while it is in memory)
            if await self.call(self.broker.min_offset, topic, queue_id) == 0:
                offset = 0
            else:
                return cmd.response(Response.QUERY_NOT_FOUND,
                                    remark="no committed offset for this group and queue")
        return cmd.response(Response.SUCCESS, ext={"offset": offset})

    async def update_consumer_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        header = Header(cmd.ext)
        key = (header.topic(), header.group("consumerGroup"), header.queue_id())
        offset = header.offset("commitOffset")
        self.pending_offsets.pop(key, None)
        await self.call(self.broker.consumer_offsets.commit, key[0], key[1], key[2], offset)
        return cmd.response(Response.SUCCESS)

    def note_offset(self, topic: str, group: str, queue_id: int, offset: int) -> None:
        self.pending_offsets[(topic, group, queue_id)] = offset
        self.offsets_dirty.set()

    async def flush_offsets(self) -> None:
        """Write the offsets that came with pulls (one file write for all of them)."""
        if not self.pending_offsets:
            return
        batch = dict(self.pending_offsets)
        await self.call(self.broker.consumer_offsets.commit_many, batch)
        for key, offset in batch.items():
            if self.pending_offsets.get(key) == offset:
                del self.pending_offsets[key]

    async def max_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        header = Header(cmd.ext)
        offset = await self.call(self.broker.max_offset, header.topic(), header.queue_id())
        return cmd.response(Response.SUCCESS, ext={"offset": offset})

    async def min_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        header = Header(cmd.ext)
        offset = await self.call(self.broker.min_offset, header.topic(), header.queue_id())
        return cmd.response(Response.SUCCESS, ext={"offset": offset})

    async def search_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        header = Header(cmd.ext)
        topic, queue_id = header.topic(), header.queue_id()
        timestamp = header.integer("timestamp", low=0)
        offset = await self.call(self._search, topic, queue_id, timestamp)
        return cmd.response(Response.SUCCESS, ext={"offset": offset})

    def _search(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp`` (store
        times grow along a queue), by bisection over single-message reads."""
        low, high = self.broker.min_offset(topic, queue_id), self.broker.max_offset(topic,
                                                                                   queue_id)
        while low < high:
            mid = (low + high) // 2
            found, _ = self.broker.pull_page(topic, queue_id, mid, 1)
            if found and (found[0].store_ms or 0) < timestamp:
                low = mid + 1
            else:
                high = mid
        return low

    # -- pull -------------------------------------------------------------------------------
    async def pull_message(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        header = Header(cmd.ext)
        group, topic, queue_id = header.group("consumerGroup"), header.topic(), header.queue_id()
        offset = header.offset("queueOffset")
        count = header.integer("maxMsgNums", 32, low=1, high=2**31 - 1)
        count = min(count, MAX_PULL_MESSAGES)
        sys_flag = header.integer("sysFlag", 0, low=0, high=2**31 - 1)
        if header.text("expressionType", "TAG") != "TAG":
            raise BadRequest(Response.SUBSCRIPTION_PARSE_FAILED,
                             "only TAG subscriptions are supported (no SQL92 filtering)")
        if queue_id >= queue_count(topic):
            raise HeaderError(f"queueId {queue_id} is illegal: topic {topic} has "
                              f"{queue_count(topic)} queue(s)")
        if sys_flag & 1:
            committed = header.integer("commitOffset", -1)
            if committed >= 0:
                self.note_offset(topic, group, queue_id, committed)
        suspend_ms = 0
        if sys_flag & 2:
            suspend_ms = min(header.integer("suspendTimeoutMillis", 0, low=0), MAX_SUSPEND_MS)
        tags = (parse_tags(cmd.ext.get("subscription") or "*") if sys_flag & 4
                else self.clients.tags(group, topic))
        self.topics.note(topic)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + suspend_ms / 1000
        poll = Poll(topic, group, conn)
        self.open_poll(poll)
        try:
            while True:
                poll.wake.clear()
                result = await self.calls.short(self._read, topic, queue_id, offset, count, tags)
                left = deadline - loop.time()
                if result.code != Response.PULL_NOT_FOUND or poll.terminated or left <= 0:
                    break
                offset = result.next_offset
                try:
                    await asyncio.wait_for(poll.wake.wait(), left)
                except asyncio.TimeoutError:
                    pass
        finally:
            self.close_poll(poll)
        self.pulled += 0 if not result.body else 1
        return cmd.response(result.code, ext={
            "suggestWhichBrokerId": 0, "nextBeginOffset": result.next_offset,
            "minOffset": result.min_offset, "maxOffset": result.max_offset},
            body=result.body)

    def _read(self, topic: str, queue_id: int, offset: int, count: int,
              tags: frozenset[str] | None) -> PullResult:
        broker = self.broker
        low, high = broker.min_offset(topic, queue_id), broker.max_offset(topic, queue_id)
        if offset < low or offset > high:
            return PullResult(Response.PULL_OFFSET_MOVED, low if offset < low else high, low, high)
        if tags is None:
            # every message: one page read into one buffer, its records copied whole in the
            # client's layout (no Message per record)
            looked = 0
            while offset < high and looked < FILTER_BUDGET:
                batch = broker.pull_batch(topic, queue_id, offset, count, MAX_PULL_BYTES)
                if batch.next_offset <= offset:
                    break
                looked += batch.next_offset - offset
                offset = batch.next_offset
                if len(batch):
                    return PullResult(Response.SUCCESS, offset, low, high,
                                      encode_page_for_client(batch, self.host_bytes, self.port))
            if offset < high:
                return PullResult(Response.PULL_RETRY_IMMEDIATELY, offset, low, high)
            return PullResult(Response.PULL_NOT_FOUND, offset, low, high)
        chunks, size, looked = [], 0, 0
        while offset < high and not chunks and looked < FILTER_BUDGET:
            messages, next_offset = broker.pull_page(topic, queue_id, offset, count)
            if next_offset <= offset:
                break
            looked += next_offset - offset
            cut = None
            for msg in messages:
                if tags is not None and msg.tags not in tags:
                    continue  # the client filters too; skipping here saves the bytes
                record = encode_for_client(msg, self.host_bytes, self.port)
                if chunks and size + len(record) > MAX_PULL_BYTES:
                    cut = msg.queue_offset
                    break
                chunks.append(record)
                size += len(record)
            offset = next_offset if cut is None else cut
        if chunks:
            return PullResult(Response.SUCCESS, offset, low, high, b"".join(chunks))
        if offset < high:  # the filter budget ran out: the client asks again from here
            return PullResult(Response.PULL_RETRY_IMMEDIATELY, offset, low, high)
        return PullResult(Response.PULL_NOT_FOUND, offset, low, high)

    # -- retries ----------------------------------------------------------------------------
    async def send_back(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        header = Header(cmd.ext)
        group = header.group("group")
        offset = header.offset("offset")
        level = header.integer("delayLevel", 0, low=-1, high=MAX_DELAY_LEVEL_FROM_CLIENT)
        max_times = header.integer("maxReconsumeTimes", DEFAULT_MAX_RECONSUME_TIMES, low=-1,
                                   high=2**31 - 1)
        if max_times < 0:
            max_times = DEFAULT_MAX_RECONSUME_TIMES
        try:
            original = await self.call(self.broker.message_at, offset)
        except (KeyError, CorruptRecordError):
            raise BadRequest(Response.SYSTEM_ERROR, f"no message starts at commit log offset "
                             f"{offset}") from None
        if is_system_topic(original.topic):
            raise BadRequest(Response.ILLEGAL_OPERATION, "a message of a system topic cannot "
                             "be sent back")
        props = {k: v for k, v in original.properties.items()
                 if k not in BROKER_OWNED_PROPERTIES and k != DELAY and k not in TIMER_PROPERTIES}
        props.setdefault(RETRY_TOPIC, original.topic)
        origin = (cmd.ext.get("originMsgId")
                  or offset_msg_id(self.host_bytes, self.port, offset))
        props.setdefault(ORIGIN_MESSAGE_ID, origin[:128])
        times = original.reconsume_times
        if times >= max_times or level < 0:
            retry = Message(topic=DLQ_PREFIX + group, body=original.body, flag=original.flag,
                            properties=props, queue_id=0, born_ms=original.born_ms,
                            reconsume_times=times + 1)
            schedule = {}
        else:
            retry = Message(topic=RETRY_PREFIX + group, body=original.body, flag=original.flag,
                            properties=props, queue_id=0, born_ms=original.born_ms,
                            reconsume_times=times + 1)
            schedule = {"delay_level": level if level > 0 else 3 + times}
        self.topics.note(retry.topic)
        await self.call(self.broker.send_batch, [retry], **schedule)
        return cmd.response(Response.SUCCESS)


__all__ = ["ConsumerHandlers", "Poll"]
