"""The RocksDB value codec: a parked message as bytes, and back.

One value = a fixed header, then three variable parts::

    offset size  field
    +----+------+-----------------+---------------------------------------------------+
    |  0 |  1   | version         | VALUE_CODEC_VERSION (1)                           |
    |  1 |  1   | flags           | bit 0: body is lz4 block-compressed; others 0     |
    |  2 |  1   | present         | bit 0: queue_id set; bit 1: born_ms set; others 0 |
    |  3 |  4   | queue_id        | signed, 0 when absent                             |
    |  7 |  4   | flag            | signed (RocketMQ's int flag)                      |
    | 11 |  8   | born_ms         | signed, 0 when absent                             |
    | 19 |  4   | reconsume_times | signed                                            |
    | 23 |  1   | topic_len       | 1..255                                            |
    | 24 |  4   | props_len       | bytes of encoded properties                       |
    | 28 |  4   | body_len        | body bytes once decompressed                      |
    | 32 |  4   | stored_body_len | body bytes as stored (== body_len when plain)     |
    +----+------+-----------------+---------------------------------------------------+
    | 36 | topic_len B topic (UTF-8) | props_len B properties | stored_body_len B body |
    +--------------------------------------------------------------------------------+

Properties use RocketMQ's ``name\\x01value\\x02`` form (they carry TAGS, KEYS and UNIQ_KEY, so
tags, keys and msg id come back from them). Only the body is ever compressed, and only when it is
larger than the threshold and lz4 actually shrinks it, so ``peek_value`` reads the queue, the
tags and the body size without decompressing anything.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import lz4.block

from rocks_timer.errors import CorruptRecordError, InvalidMessageError
from rocks_timer.message import KEYS, TAGS, Message, decode_properties

VALUE_CODEC_VERSION = 1
FLAG_LZ4 = 0x01
KNOWN_FLAGS = FLAG_LZ4
PRESENT_QUEUE_ID = 0x01
PRESENT_BORN_MS = 0x02
KNOWN_PRESENT = PRESENT_QUEUE_ID | PRESENT_BORN_MS

HEADER = struct.Struct(">BBBiiqiBIII")
SIZE = HEADER.size  # 36

_I32 = (-(1 << 31), (1 << 31) - 1)
_I64 = (-(1 << 63), (1 << 63) - 1)
_U32_MAX = (1 << 32) - 1


@dataclass(frozen=True, slots=True)
class ValueInfo:
    """What ``scan`` needs from a value, read without decompressing the body."""

    queue_id: int
    body_size: int
    tags: str | None


def encode_value(message: Message, compress_threshold: int) -> bytes:
    """The value bytes of ``message``; the body is lz4-compressed when longer than the threshold
    and compression makes it smaller."""
    topic = message.topic.encode("utf-8")
    if not topic:
        raise InvalidMessageError("a timer message needs a topic")
    props = message.encoded_properties
    body = message.body
    flags, stored = 0, body
    if len(body) > compress_threshold:
        packed = lz4.block.compress(body, store_size=False)
        if len(packed) < len(body):
            flags, stored = FLAG_LZ4, packed
    queue_id, born_ms = message.queue_id, message.born_ms
    present = (0 if queue_id is None else PRESENT_QUEUE_ID) | (
        0 if born_ms is None else PRESENT_BORN_MS)
    try:
        header = HEADER.pack(
            VALUE_CODEC_VERSION, flags, present, queue_id or 0, message.flag, born_ms or 0,
            message.reconsume_times, len(topic), len(props), len(body), len(stored))
    except struct.error:
        raise InvalidMessageError(_out_of_range(message, topic, props)) from None
    return header + topic + props + stored


def _out_of_range(message: Message, topic: bytes, props: bytes) -> str:
    """Which field does not fit its header slot (only computed on the error path)."""
    checks = [("topic bytes", len(topic), (1, 255)), ("queue_id", message.queue_id or 0, _I32),
              ("flag", message.flag, _I32), ("born_ms", message.born_ms or 0, _I64),
              ("reconsume_times", message.reconsume_times, _I32),
              ("properties bytes", len(props), (0, _U32_MAX)),
              ("body bytes", len(message.body), (0, _U32_MAX))]
    for name, value, (low, high) in checks:
        if not low <= value <= high:
            return f"{name}={value} is outside {low}..{high}"
    return "a field does not fit the value header"


def _corrupt(key: bytes, raw: bytes, why: str) -> CorruptRecordError:
    key_hex = bytes(key).hex()
    return CorruptRecordError(f"timer value of key {key_hex} is corrupt: {why}",
                              where=key_hex, raw=bytes(raw))


def _parse(key: bytes, raw: bytes) -> tuple[tuple, int]:
    """Checked header fields and the offset where the topic starts."""
    if len(raw) < SIZE:
        raise _corrupt(key, raw, f"{len(raw)} bytes, shorter than the {SIZE}-byte header")
    fields = HEADER.unpack_from(raw)
    version, flags, present = fields[0], fields[1], fields[2]
    if version != VALUE_CODEC_VERSION:
        raise _corrupt(key, raw, f"format version {version}, expected {VALUE_CODEC_VERSION}")
    if flags & ~KNOWN_FLAGS:
        raise _corrupt(key, raw, f"unknown flags 0x{flags:02x}")
    if present & ~KNOWN_PRESENT:
        raise _corrupt(key, raw, f"unknown presence bits 0x{present:02x}")
    topic_len, props_len, body_len, stored_len = fields[7:]
    expected = SIZE + topic_len + props_len + stored_len
    if topic_len == 0 or len(raw) != expected:
        raise _corrupt(key, raw, f"{len(raw)} bytes but the header describes {expected} "
                                 f"(topic {topic_len}, properties {props_len}, body {stored_len})")
    if not flags & FLAG_LZ4 and stored_len != body_len:
        raise _corrupt(key, raw, f"plain body of {stored_len} bytes but body_len says {body_len}")
    return fields, SIZE


def decode_value(key: bytes, raw: bytes) -> Message:
    """Inverse of :func:`encode_value`. Any failure is a CorruptRecordError naming ``key`` (hex)
    and keeping ``raw``."""
    raw = bytes(raw)
    fields, pos = _parse(key, raw)
    (_, flags, present, queue_id, flag, born_ms, reconsume_times,
     topic_len, props_len, body_len, stored_len) = fields
    try:
        topic = raw[pos:pos + topic_len].decode("utf-8")
        pos += topic_len
        properties = decode_properties(raw[pos:pos + props_len])
    except UnicodeDecodeError as exc:
        raise _corrupt(key, raw, f"topic or properties are not UTF-8 ({exc.reason})") from None
    pos += props_len
    body = raw[pos:pos + stored_len]
    if flags & FLAG_LZ4:
        try:
            body = lz4.block.decompress(body, uncompressed_size=body_len)
        except (lz4.block.LZ4BlockError, ValueError, OverflowError) as exc:
            raise _corrupt(key, raw, f"lz4 body does not decompress ({exc})") from None
        if len(body) != body_len:
            raise _corrupt(key, raw, f"lz4 body gave {len(body)} bytes, expected {body_len}")
    try:
        return Message(
            topic=topic, body=body, flag=flag, properties=properties,
            queue_id=queue_id if present & PRESENT_QUEUE_ID else None,
            born_ms=born_ms if present & PRESENT_BORN_MS else None,
            reconsume_times=reconsume_times,
        )
    except InvalidMessageError as exc:
        raise _corrupt(key, raw, str(exc)) from None


def peek_keys(key: bytes, raw: bytes) -> tuple[str, ...]:
    """The message's KEYS, as ``decode_value(key, raw).keys`` gives them, without building the
    message (a delivery's key-index update); CorruptRecordError as ``decode_value`` raises it."""
    fields, pos = _parse(key, raw)
    pos += fields[7]
    props = raw[pos:pos + fields[8]]
    if b"KEYS\x01" not in props:  # no entry can be named KEYS
        return ()
    try:
        value = decode_properties(props).get(KEYS)
    except UnicodeDecodeError as exc:
        raise _corrupt(key, raw, f"properties are not UTF-8 ({exc.reason})") from None
    return tuple(k for k in value.split(" ") if k) if value else ()


def peek_value(key: bytes, raw: bytes) -> ValueInfo:
    """Queue id, uncompressed body size and tags, without touching the body."""
    raw = bytes(raw)
    fields, pos = _parse(key, raw)
    present, queue_id, topic_len, props_len, body_len = (fields[2], fields[3], fields[7],
                                                         fields[8], fields[9])
    pos += topic_len
    try:
        properties = decode_properties(raw[pos:pos + props_len])
    except UnicodeDecodeError as exc:
        raise _corrupt(key, raw, f"properties are not UTF-8 ({exc.reason})") from None
    return ValueInfo(queue_id if present & PRESENT_QUEUE_ID else 0, body_len, properties.get(TAGS))
