"""Protobuf messages ⇄ rocks-timer messages.

Message ids: the RocketMQ 5 clients make V1 ids, 34 hex characters whose first byte is the
version ``01``; the 16 bytes after it are exactly a rocks-timer ``UNIQ_KEY`` (32 hex). So a client
id ``01`` + X is stored as ``UNIQ_KEY`` X, and every message reaches gRPC consumers with id ``01`` +
its ``UNIQ_KEY`` (messages sent with the library or the CLI included).

Sent: ``topic``, ``body``, ``tag`` → TAGS, ``keys`` → KEYS, ``user_properties`` → properties
(names RocketMQ reserves are refused), ``born_timestamp``, ``delivery_timestamp`` → TIMER_DELIVER_MS.
Received: the same back, plus ``body_digest`` (CRC32, 8 upper-case hex digits), ``body_encoding``
IDENTITY, ``store_timestamp``, ``delivery_attempt``, the receipt handle and queue position.
"""
from __future__ import annotations

import re
import zlib

from rocks_timer.message import (BROKER_OWNED_PROPERTIES, DELAY, KEYS, TAGS, TIMER_DELIVER_MS,
                                 TIMER_PROPERTIES, UNIQ_KEY, Message)
from rocks_timer.pop import Popped
from rocks_timer.pop.service import RECONSUME_TIME, RETRY_TOPIC
from rocks_timer.proxy.protocol import Code, pb
from rocks_timer.proxy.status import ProxyError
from rocks_timer.routing import validate_key, validate_topic
from rocks_timer.errors import InvalidMessageError

_V1_ID = re.compile(r"^01[0-9A-Fa-f]{32}$")
RESERVED = frozenset(BROKER_OWNED_PROPERTIES | set(TIMER_PROPERTIES) | {
    TAGS, KEYS, UNIQ_KEY, DELAY, RETRY_TOPIC, RECONSUME_TIME, "WAIT", "MAX_RECONSUME_TIMES",
    "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "SHARDING_KEY", "__SHARDINGKEY",
    "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "MSG_REGION", "TRACE_ON"})
UNSUPPORTED_TYPES = {pb.FIFO: "FIFO messages (message groups)", pb.TRANSACTION: "transactions",
                     pb.LITE: "lite topics", pb.PRIORITY: "priority messages"}


def topic_name(resource: "pb.Resource") -> str:
    """A topic a client may use (ILLEGAL_TOPIC otherwise)."""
    try:
        return validate_topic(resource.name)
    except InvalidMessageError as exc:
        raise ProxyError(Code.ILLEGAL_TOPIC, str(exc)) from None


_GROUP = re.compile(r"^[%a-zA-Z0-9_-]{1,255}$")


def group_name(resource: "pb.Resource") -> str:
    if not _GROUP.match(resource.name):
        raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP,
                         f"consumer group {resource.name[:80]!r} is invalid; it must match "
                         "^[%a-zA-Z0-9_-]{1,255}$")
    return resource.name


def internal_id(client_id: str) -> str:
    if not _V1_ID.match(client_id):
        raise ProxyError(Code.ILLEGAL_MESSAGE_ID, f"message id {client_id[:80]!r} is not a "
                         "RocketMQ V1 id (34 hex characters starting 01)")
    return client_id[2:].upper()


def client_id(msg: Message) -> str:
    return "01" + msg.msg_id if msg.msg_id and len(msg.msg_id) == 32 else (msg.msg_id or "")


def _timestamp_ms(ts) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def from_proto(m: "pb.Message", max_body: int) -> Message:
    """The library message a SendMessage entry stands for; ProxyError if it is not acceptable."""
    topic = topic_name(m.topic)
    sp = m.system_properties
    kind = UNSUPPORTED_TYPES.get(sp.message_type)
    if kind is None:
        for field, what in (("message_group", "FIFO messages (message groups)"),
                            ("lite_topic", "lite topics"), ("priority", "priority messages")):
            if sp.HasField(field):
                kind = what
    if kind:
        raise ProxyError(Code.UNSUPPORTED, f"{kind} are not supported by rocks-timer")
    body = m.body
    if sp.body_encoding == pb.GZIP:
        try:
            inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)
            body = inflater.decompress(body, max_body + 1)
        except zlib.error as exc:
            raise ProxyError(Code.BAD_REQUEST, f"GZIP body does not inflate: {exc}") from None
    if not body:
        raise ProxyError(Code.MESSAGE_BODY_EMPTY, "message body is empty")
    if len(body) > max_body:
        raise ProxyError(Code.MESSAGE_BODY_TOO_LARGE, f"message body of {len(body)}+ bytes "
                         f"exceeds the maximum of {max_body} bytes")
    user = m.user_properties
    props = dict(user) if user else {}
    if props:
        reserved = sorted(RESERVED & props.keys())
        if reserved:
            raise ProxyError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                             f"property names {', '.join(reserved)} are reserved by RocketMQ")
    if sp.HasField("tag"):
        tag = sp.tag
        if not tag.strip() or "|" in tag:
            raise ProxyError(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag[:80]!r} is blank or has '|'")
        props[TAGS] = tag
    if sp.keys:
        keys = list(sp.keys)
        for key in keys:  # the library's rule, which find and recall-by-key apply too
            try:
                validate_key(key)
            except InvalidMessageError as exc:
                raise ProxyError(Code.ILLEGAL_MESSAGE_KEY, str(exc)) from None
        props[KEYS] = " ".join(keys)
    props[UNIQ_KEY] = internal_id(sp.message_id)
    if sp.HasField("delivery_timestamp"):
        props[TIMER_DELIVER_MS] = str(_timestamp_ms(sp.delivery_timestamp))
    born = _timestamp_ms(sp.born_timestamp) if sp.HasField("born_timestamp") else None
    return Message(topic=topic, body=body, properties=props, born_ms=born)


def timestamp(ms: int):
    return pb.google_dot_protobuf_dot_timestamp__pb2.Timestamp(seconds=ms // 1000,
                                                               nanos=(ms % 1000) * 1_000_000)


def to_proto(popped: Popped, namespace: str, host: str) -> "pb.Message":
    """What a ReceiveMessage stream carries for one popped message."""
    out = pb.Message()
    fill_message(out, popped, namespace, host)
    return out


_DELAY, _NORMAL, _CRC32, _IDENTITY = pb.DELAY, pb.NORMAL, pb.CRC32, pb.IDENTITY


def fill_message(out: "pb.Message", popped: Popped, namespace: str, host: str) -> None:
    """``to_proto`` into an empty message: the one a response holds already, so the stream
    writes each message once instead of building it and copying it into its response."""
    msg = popped.message
    props = msg.properties
    body = msg.body
    out.body = body
    topic = out.topic
    topic.name = popped.topic
    topic.resource_namespace = namespace
    user = {name: value for name, value in props.items() if name not in RESERVED}
    if user:
        out.user_properties.update(user)
    sp = out.system_properties
    if msg.tags:
        sp.tag = msg.tags
    if msg.keys:
        sp.keys.extend(msg.keys)
    sp.message_id = client_id(msg)
    digest = sp.body_digest
    digest.type = _CRC32
    digest.checksum = format(zlib.crc32(body) & 0xFFFFFFFF, "08X")
    sp.body_encoding = _IDENTITY
    deliver = props.get(TIMER_DELIVER_MS)
    sp.message_type = _DELAY if deliver or props.get(DELAY) else _NORMAL
    if msg.born_ms is not None:
        _set_timestamp(sp.born_timestamp, msg.born_ms)
    sp.born_host = host
    if msg.store_ms is not None:
        _set_timestamp(sp.store_timestamp, msg.store_ms)
    sp.store_host = host
    if deliver and deliver.lstrip("-").isdigit():
        _set_timestamp(sp.delivery_timestamp, max(0, int(deliver)))
    sp.delivery_attempt = popped.delivery_attempt
    sp.receipt_handle = popped.receipt_handle
    sp.queue_id = msg.queue_id or 0
    sp.queue_offset = msg.queue_offset or 0
    invisible = sp.invisible_duration
    invisible.seconds, millis = divmod(popped.invisible_ms, 1000)
    invisible.nanos = millis * 1_000_000


def _set_timestamp(ts, ms: int) -> None:
    """``ts.CopyFrom(timestamp(ms))`` without the temporary message."""
    ts.seconds, millis = divmod(ms, 1000)
    ts.nanos = millis * 1_000_000
