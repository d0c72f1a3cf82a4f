"""Producer requests: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and
RECALL_MESSAGE (370).

A sent message becomes a library ``Message`` and goes through ``Broker.send_batch``, so routing is
the library's (ARCHITECTURE §3): ``DELAY`` to the legacy levels, ``TIMER_*`` to the timer engine. A
client's retry of a send (same topic and ``UNIQ_KEY``) is stored once (``RecentSends``, the gRPC
front's dedup). Like a RocketMQ broker, a send to a retry topic whose ``reconsumeTimes`` passed
the group's maximum goes to the group's dead-letter topic instead.
"""
from __future__ import annotations

import hashlib
import re

from rocks_timer.errors import InvalidMessageError
from rocks_timer.message import (DELAY, TIMER_PROPERTIES, UNIQ_KEY, Message, decode_properties,
                                 new_msg_id)
from rocks_timer.remoting.codes import Response
from rocks_timer.remoting.command import RemotingCommand
from rocks_timer.remoting.headers import Header, HeaderError
from rocks_timer.remoting.records import CLIENT_UNIQ_KEY, BodyError, decode_batch, uncompress
from rocks_timer.remoting.topics import DLQ_PREFIX, RETRY_PREFIX, queue_count
from rocks_timer.timer.handles import Handle

MAX_BATCH = 1024
MAX_CLIENT_KEY = 128
_MSG_ID = re.compile(r"^[0-9A-Fa-f]{32}$")
DEFAULT_MAX_RECONSUME_TIMES = 16
REGION = "DefaultRegion"

try:  # a plain send's header read in C (rocks_timer/_native/remoting.c), when it was built
    from rocks_timer._native.codec import send_fields as _native_send_fields
except ImportError:  # pragma: no cover - no C compiler at install time
    _native_send_fields = None


class BadRequest(ValueError):
    """A request the front answers with ``code`` and the message as remark."""

    def __init__(self, code: int, text: str):
        super().__init__(text)
        self.code = code


def plain_send(cmd: RemotingCommand, max_body: int) -> Message | None:
    """The message of a plain SEND_MESSAGE or SEND_MESSAGE_V2 (not a batch, not compressed,
    not to a retry or dead-letter topic, with its client's UNIQ_KEY, every field written
    plainly) read and checked in C (``_native/remoting.c``, ``send_fields``); None for
    anything else, which ``read_send_request`` then reads, or refuses. The tests hold the two
    equal (tests/fronts/test_remoting_native.py)."""
    if _native_send_fields is None or type(cmd.ext) is not dict or type(cmd.body) is not bytes:
        return None
    fields = _native_send_fields(cmd.code, cmd.ext, cmd.body, max_body)
    if fields is None:
        return None
    topic, queue_id, flag, properties, born_ms, reconsume = fields
    name_by_client_key(properties)
    return Message.from_wire(topic, cmd.body, properties, flag=flag, queue_id=queue_id,
                             born_ms=born_ms, reconsume_times=reconsume)


def read_send_request(cmd: RemotingCommand, max_body: int) -> tuple[str, list[Message]]:
    """A send request's topic and messages, checked in Python (raises what the front answers
    as an error): the reference of ``plain_send``, and the reader of every other send."""
    v2 = cmd.code != 10
    header = Header.send(v2, cmd.ext)
    topic = header.topic()
    queue_id = header.integer("queueId", 0, low=-1, high=2**31 - 1)
    if queue_id < 0:
        queue_id = 0
    if queue_id >= queue_count(topic):
        raise HeaderError(f"queueId {queue_id} is illegal: topic {topic} has "
                          f"{queue_count(topic)} queue(s)")
    sys_flag = header.integer("sysFlag", 0, low=0, high=2**31 - 1)
    born_ms = header.integer("bornTimestamp", 0, low=0) or None
    flag = header.integer("flag", 0, low=-2**31, high=2**31 - 1)
    reconsume = header.integer("reconsumeTimes", 0, low=0, high=2**31 - 1)
    max_reconsume = header.integer("maxReconsumeTimes", DEFAULT_MAX_RECONSUME_TIMES,
                                   low=-1, high=2**31 - 1)
    if max_reconsume < 0:
        max_reconsume = DEFAULT_MAX_RECONSUME_TIMES
    if cmd.code == 320 or header.flag("batch"):
        try:
            entries = decode_batch(cmd.body, MAX_BATCH)
        except BodyError as exc:
            raise HeaderError(str(exc)) from None
    else:
        props = decode_properties(header.text("properties", ""))
        entries = [(flag, uncompress(cmd.body, sys_flag, max_body), props)]
    messages = []
    for entry_flag, body, props in entries:
        if len(body) > max_body:
            raise BadRequest(Response.MESSAGE_ILLEGAL, f"the message body of {len(body)} "
                             f"bytes is larger than the limit of {max_body} bytes")
        messages.append(_message(topic, queue_id, entry_flag, body, props, born_ms, reconsume,
                                 max_reconsume))
    return topic, messages


def _message(topic: str, queue_id: int, flag: int, body: bytes, props: dict,
             born_ms: int | None, reconsume: int, max_reconsume: int) -> Message:
    props = dict(props)
    props.pop("WAIT", None)
    if UNIQ_KEY not in props:  # every client sets one; the dedup needs one
        props[UNIQ_KEY] = new_msg_id()
    name_by_client_key(props)
    if topic.startswith(RETRY_PREFIX) and reconsume > max_reconsume:
        # RocketMQ moves a retry that ran out of attempts to the dead-letter topic
        topic, queue_id = DLQ_PREFIX + topic[len(RETRY_PREFIX):], 0
        props.pop(DELAY, None)
        for name in TIMER_PROPERTIES:
            props.pop(name, None)
    return Message(topic=topic, body=body, flag=flag, properties=props, queue_id=queue_id,
                   born_ms=born_ms, reconsume_times=reconsume)


def name_by_client_key(props: dict) -> None:
    """Store a message under its client's UNIQ_KEY when that is 32 hex digits, rtimer's ids.
    A Java client on a host without a private IPv4 address makes 56 (this benchmark machine's
    does): the client's id is kept for its consumers (``CLIENT_UNIQ_KEY``) and the message is
    stored under a 32-digit id derived from it (the same for a retry of the send)."""
    client_key = props[UNIQ_KEY]
    if not _MSG_ID.match(client_key):
        props[CLIENT_UNIQ_KEY] = client_key[:MAX_CLIENT_KEY]
        props[UNIQ_KEY] = hashlib.md5(client_key.encode("utf-8")).hexdigest().upper()


class ProducerHandlers:
    """Mixed into ``RemotingService``: the producer side."""

    async def send_message(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        messages = self._send_request(cmd)
        results = await self.recent.send(messages, self._store)
        return self._send_reply(cmd, messages, results)

    async def send_messages(self, cmds: list[RemotingCommand]) -> list[RemotingCommand]:
        """The sends of one connection read together (a client with many sends in flight):
        each is checked on its own and a bad one gets the answer it gets alone; the others are
        stored by one ``Broker.send_batch``, and each gets its own reply. The broker checks a
        whole batch before it stores any of it, so when it refuses one message (nothing
        stored), every send is tried again alone and gets its own answer."""
        replies: list[RemotingCommand | None] = [None] * len(cmds)
        ready = []
        for i, cmd in enumerate(cmds):
            try:
                ready.append((i, cmd, self._send_request(cmd)))
            except Exception as exc:  # noqa: BLE001 - answered as the request alone would be
                replies[i] = self.error_reply(cmd, exc)
        if len(ready) > 1:
            try:
                outcomes = await self.recent.send_many([m for _, _, m in ready], self._store)
            except (InvalidMessageError, ValueError):
                outcomes = None  # one message is refused: each send alone, below
            except Exception as exc:  # noqa: BLE001 - a closed or failing store: each answers it
                outcomes = [exc] * len(ready)
            if outcomes is not None:
                for (i, cmd, messages), outcome in zip(ready, outcomes):
                    replies[i] = (self.error_reply(cmd, outcome)
                                  if isinstance(outcome, Exception)
                                  else self._send_reply(cmd, messages, outcome))
                ready = []
        for i, cmd, messages in ready:
            try:
                results = await self.recent.send(messages, self._store)
            except Exception as exc:  # noqa: BLE001 - answered as the request alone would be
                replies[i] = self.error_reply(cmd, exc)
            else:
                replies[i] = self._send_reply(cmd, messages, results)
        return replies

    def _send_request(self, cmd: RemotingCommand) -> list[Message]:
        """A send request's messages, checked (raises what the front answers as an error)."""
        limit = self.broker.config.max_message_size
        message = plain_send(cmd, limit)
        if message is not None:
            self.topics.note(message.topic)
            return [message]
        topic, messages = read_send_request(cmd, limit)
        self.topics.note(topic)
        return messages

    def _send_reply(self, cmd: RemotingCommand, messages: list[Message],
                    results: list) -> RemotingCommand:
        ids = [m.properties.get(CLIENT_UNIQ_KEY, r.msg_id) for m, r in zip(messages, results)]
        ext = {"msgId": ",".join(ids), "queueId": str(results[0].queue_id), "queueOffset": "0",
               "MSG_REGION": REGION, "TRACE_ON": "true"}
        handles = [r.handle for r in results if r.handle]
        if len(results) == 1 and handles:
            ext["recallHandle"] = handles[0]
        return cmd.response(Response.SUCCESS, ext=ext)

    async def _store(self, messages):
        return await self.calls.short(self.broker.send_batch, messages)

    def _store_now(self, messages):
        return self.calls.run_now(self.broker.send_batch, messages)

    async def recall_message(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        header = Header(cmd.ext)
        topic = header.topic()
        text = header.text("recallHandle", max_len=400)
        try:
            handle = Handle.decode(text)
        except ValueError as exc:
            raise BadRequest(Response.ILLEGAL_OPERATION, f"recall failed: {exc}") from None
        if handle.topic != topic:
            raise BadRequest(Response.ILLEGAL_OPERATION,
                             f"recall failed: the handle belongs to topic {handle.topic}, not "
                             f"{topic}")
        if not await self.calls.short(self.broker.cancel, text):
            raise BadRequest(Response.ILLEGAL_OPERATION,
                             "recall failed: the message was delivered, is being delivered, "
                             "or was recalled already")
        return cmd.response(Response.SUCCESS, ext={"msgId": handle.msg_id})


__all__ = ["ProducerHandlers", "BadRequest", "plain_send", "read_send_request"]
