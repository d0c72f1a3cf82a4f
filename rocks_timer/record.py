"""The CommitLog record layout (RocketMQ's V1 message record, IPv4 hosts), big-endian.

    +--------+-------+-------+---------+------+-------------+----------------+---------+
    | size 4 | magic | crc 4 | queueId | flag | queueOffset | physicalOffset | sysFlag |
    |        |   4   |       |    4    |  4   |      8      |       8        |    4    |
    +--------+-------+-------+---------+------+-------------+----------------+---------+
    | bornMs 8 | bornHost 8 | storeMs 8 | storeHost 8 | reconsumeTimes 4 | preparedTxOffset 8 |
    +----------+------------+-----------+-------------+------------------+--------------------+
    | bodyLen 4 | body | topicLen 1 | topic | propsLen 2 | properties (name\\x01value\\x02...) |
    +-----------+------+------------+-------+------------+-------------------------------------+

``size = 91 + len(body) + len(topic) + len(properties)`` exactly as RocketMQ V1. One deliberate
difference: RocketMQ's ``bodyCRC`` covers the body only; here ``crc`` is the CRC32 of every byte
after the crc field, so a torn or flipped byte anywhere in the record is caught.

The end of a segment is padded with a blank: ``[remaining size 4][BLANK_MAGIC 4]``.
"""
from __future__ import annotations

import struct
import zlib
from functools import lru_cache

from rocks_timer.errors import CorruptRecordError, InvalidMessageError
from rocks_timer.message import Message, decode_properties, encode_properties

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
MIN_BLANK_LEN = 8
MAX_PROPERTIES_SIZE = 32_767      # what a producer may send (RocketMQ's limit)
MAX_STORED_PROPERTIES = 65_535    # what the 2-byte length holds: room for broker-added properties

HEADER = struct.Struct(">iIIiiqqiq8sq8siq")
HEADER_SIZE = HEADER.size  # 84
BODY_LEN = struct.Struct(">i")
PROPS_LEN = struct.Struct(">H")
FIXED_SIZE = HEADER_SIZE + 4 + 1 + 2  # 91
PREFIX = struct.Struct(">iI")  # size, magic: enough to walk records
_CRC_FROM = 12
_QUEUE = struct.Struct(">iiq")  # queueId, flag, queueOffset at byte 12

_LOCALHOST = bytes([127, 0, 0, 1]) + (10911).to_bytes(4, "big")


def record_size(body_len: int, topic_len: int, props_len: int) -> int:
    return FIXED_SIZE + body_len + topic_len + props_len


def message_record_size(msg: Message) -> int:
    """Size of the record ``msg`` becomes in the CommitLog."""
    return record_size(len(msg.body), len(_topic_prefix(msg.topic)) - 1,
                       len(msg.encoded_properties))


_LEAD = struct.Struct(">iII")  # size, magic, crc
_REST = struct.Struct(">iiqqiq8sq8siqi")  # queueId .. preparedTxOffset, then bodyLen


def encode_record_into(buf: bytearray, msg: Message, props: bytes, *, queue_id: int,
                       queue_offset: int, physical_offset: int, store_ms: int,
                       born_ms: int) -> int:
    """Append one record to ``buf`` (the writer's group buffer); returns its size.

    ``props`` is ``encode_properties(msg.properties)``; the CRC is computed piecewise so the
    record is never copied.
    """
    topic = _topic_prefix(msg.topic)
    if len(props) > MAX_STORED_PROPERTIES:
        raise InvalidMessageError(
            f"properties of {len(props)} bytes exceed the limit of {MAX_STORED_PROPERTIES} bytes"
        )
    body = msg.body
    size = FIXED_SIZE - 1 + len(body) + len(topic) + len(props)
    rest = _REST.pack(queue_id, msg.flag, queue_offset, physical_offset, 0, born_ms, _LOCALHOST,
                      store_ms, _LOCALHOST, msg.reconsume_times, 0, len(body))
    tail = topic + PROPS_LEN.pack(len(props)) + props
    crc = zlib.crc32(tail, zlib.crc32(body, zlib.crc32(rest)))
    buf += _LEAD.pack(size, MESSAGE_MAGIC, crc)
    buf += rest
    buf += body
    buf += tail
    return size


# --- prepared records: encoded before the writer knows where they go ---------------------------
PREPARED_TRAILER = struct.Struct(">qB")  # after the record: its tags code, and flags
PREPARED_TRAILER_SIZE = PREPARED_TRAILER.size  # 9
PREPARED_BORN_AT_STORE = 0x01  # flag: bornTimestamp is the store time (the message had none)
_QUEUE_OFFSET_AT, _PHYSICAL_OFFSET_AT, _BORN_MS_AT, _STORE_MS_AT = 20, 28, 40, 56
_U64 = struct.Struct(">q")
_I32 = struct.Struct(">i")


def prepare_record(msg: Message, tags_code: int) -> bytes:
    """A *prepared* record: ``msg``'s whole CommitLog record with queueOffset, physicalOffset,
    storeTimestamp and crc left 0, followed by ``PREPARED_TRAILER``: the tags code of its
    ConsumeQueue entry and flags (``PREPARED_BORN_AT_STORE`` when ``msg.born_ms`` is None:
    bornTimestamp is left 0 and becomes the store time). The writer (``batch_encoder``) fills
    in those fields, so a prepared record costs it a copy and a CRC. The delivery path builds
    these from stored timer values (rocks_timer/timer/delivery.py)."""
    buf = bytearray()
    encode_record_into(buf, msg, msg.encoded_properties, queue_id=msg.queue_id or 0,
                       queue_offset=0, physical_offset=0, store_ms=0, born_ms=msg.born_ms or 0)
    buf[8:12] = bytes(4)
    flags = PREPARED_BORN_AT_STORE if msg.born_ms is None else 0
    return bytes(buf) + PREPARED_TRAILER.pack(tags_code, flags)


def prepared_fields(blob: bytes) -> tuple[int, str, int, int]:
    """(record size, topic, queue id, tags code) of a prepared record; ValueError if its
    lengths do not add up."""
    (size,) = _I32.unpack_from(blob, 0)
    body_len = _I32.unpack_from(blob, HEADER_SIZE)[0]
    at = HEADER_SIZE + 4 + body_len
    topic_len = blob[at]
    (props_len,) = PROPS_LEN.unpack_from(blob, at + 1 + topic_len)
    if size != FIXED_SIZE + body_len + topic_len + props_len or \
            len(blob) != size + PREPARED_TRAILER_SIZE:
        raise ValueError(f"prepared record of {len(blob)} bytes: its lengths do not add up")
    topic = blob[at + 1:at + 1 + topic_len].decode("utf-8")
    return size, topic, _I32.unpack_from(blob, 12)[0], PREPARED_TRAILER.unpack_from(blob, size)[0]


def finish_prepared_into(buf: bytearray, blob: bytes, *, queue_offset: int,
                         physical_offset: int, store_ms: int) -> int:
    """Append the record of a prepared ``blob`` to ``buf`` with its place, store time and CRC
    filled in; returns its size."""
    (size,) = _I32.unpack_from(blob, 0)
    record = bytearray(blob[:size])
    _U64.pack_into(record, _QUEUE_OFFSET_AT, queue_offset)
    _U64.pack_into(record, _PHYSICAL_OFFSET_AT, physical_offset)
    _U64.pack_into(record, _STORE_MS_AT, store_ms)
    if blob[-1] & PREPARED_BORN_AT_STORE:
        _U64.pack_into(record, _BORN_MS_AT, store_ms)
    struct.pack_into(">I", record, 8, zlib.crc32(memoryview(record)[_CRC_FROM:]))
    buf += record
    return size


def prepared_identity(blob: bytes) -> tuple[str, str]:
    """(msg id, topic) of a prepared record (what a put result names)."""
    size, topic, _, _ = prepared_fields(blob)
    body_len = _I32.unpack_from(blob, HEADER_SIZE)[0]
    at = HEADER_SIZE + 4 + body_len + 1 + len(topic.encode("utf-8")) + 2
    return decode_properties(blob[at:size]).get("UNIQ_KEY", ""), topic


@lru_cache(maxsize=1024)
def _topic_prefix(topic: str) -> bytes:
    """Topic length byte + topic bytes (cached: a log has few topics)."""
    raw = topic.encode("utf-8")
    if len(raw) > 127:
        raise InvalidMessageError(f"topic {topic!r} is longer than 127 bytes")
    return bytes([len(raw)]) + raw


def encode_record(msg: Message, *, queue_id: int, queue_offset: int, physical_offset: int,
                  store_ms: int, born_ms: int) -> bytes:
    buf = bytearray()
    encode_record_into(buf, msg, encode_properties(msg.properties), queue_id=queue_id,
                       queue_offset=queue_offset, physical_offset=physical_offset,
                       store_ms=store_ms, born_ms=born_ms)
    return bytes(buf)


def encode_blank(size: int) -> bytes:
    return PREFIX.pack(size, BLANK_MAGIC) + bytes(size - MIN_BLANK_LEN)


def decode_record(data: bytes | memoryview, physical_offset: int, *, check_crc: bool = True
                  ) -> Message:
    """Decode one whole record; ``data`` holds exactly ``size`` bytes."""
    view = memoryview(data)
    where = f"commitlog offset {physical_offset}"
    if len(view) < FIXED_SIZE:
        raise CorruptRecordError(f"record at {where} is truncated ({len(view)} bytes)",
                                 where=physical_offset, raw=bytes(view))
    (size, magic, crc, queue_id, flag, queue_offset, stored_offset, _sys, born_ms, _bh, store_ms,
     _sh, reconsume, _ptx) = HEADER.unpack_from(view, 0)
    if magic != MESSAGE_MAGIC or size != len(view):
        raise CorruptRecordError(f"record at {where} has magic {magic:#x} and size {size} "
                                 f"(expected {MESSAGE_MAGIC:#x} and {len(view)})",
                                 where=physical_offset, raw=bytes(view))
    if check_crc and zlib.crc32(view[_CRC_FROM:]) != crc:
        raise CorruptRecordError(f"record at {where} fails its CRC32 check",
                                 where=physical_offset, raw=bytes(view))
    try:
        pos = HEADER_SIZE
        (body_len,) = BODY_LEN.unpack_from(view, pos)
        pos += 4
        body = bytes(view[pos:pos + body_len])
        pos += body_len
        topic_len = view[pos]
        topic = bytes(view[pos + 1:pos + 1 + topic_len]).decode("utf-8")
        pos += 1 + topic_len
        (props_len,) = PROPS_LEN.unpack_from(view, pos)
        props = decode_properties(bytes(view[pos + 2:pos + 2 + props_len]))
        if pos + 2 + props_len != size or len(body) != body_len:
            raise ValueError("lengths do not add up")
    except (struct.error, ValueError, IndexError, UnicodeError) as exc:
        raise CorruptRecordError(f"record at {where} does not decode: {exc}",
                                 where=physical_offset, raw=bytes(view)) from None
    return Message(topic=topic, body=body, flag=flag, properties=props, queue_id=queue_id,
                   queue_offset=queue_offset, commitlog_offset=stored_offset, born_ms=born_ms,
                   store_ms=store_ms, reconsume_times=reconsume)


def java_string_hash(text: str) -> int:
    """Java ``String.hashCode`` over UTF-16 code units, as a signed 32-bit value."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h
