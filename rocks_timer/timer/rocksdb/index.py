"""What a value of the ``timer`` index column family is, in either layout.

``inline`` layout: the value is the whole message (:mod:`rocks_timer.timer.values`, first byte
``VALUE_CODEC_VERSION`` = 1). ``vlog`` layout: the value is a pointer into a value segment, or,
for a message whose encoded value is at most ``vlog_inline_max_bytes``, the inline value itself.
The first byte tells them apart. A pointer::

    offset size  field
    +----+------+------------+------------------------------------------------------+
    |  0 |  1   | version    | POINTER_VERSION (0x81)                               |
    |  1 |  4   | segment    | value segment id                                     |
    |  5 |  8   | offset     | where the record starts in the segment               |
    | 13 |  4   | length     | record bytes (header + key + value)                  |
    | 17 |  4   | queue_id   | signed; what ``scan`` lists, 0 when absent           |
    | 21 |  4   | body_size  | body bytes once decompressed; what ``scan`` lists    |
    | 25 |  2   | tags_len   | bytes of the tags (UTF-8), 0 when there are none     |
    +----+------+------------+------------------------------------------------------+
    | 27 | tags_len B tags                                                          |
    +---------------------------------------------------------------------------------+

So ``scan`` never reads a segment.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from rocks_timer.errors import CorruptRecordError
from rocks_timer.timer.values import ValueInfo, peek_value

POINTER = struct.Struct(">BIQIiIH")
SIZE = POINTER.size  # 27
POINTER_VERSION = 0x81
MAX_TAGS = (1 << 16) - 1


class Pointer(NamedTuple):
    segment: int
    offset: int
    length: int


def is_pointer(value: bytes) -> bool:
    return bool(value) and value[0] == POINTER_VERSION


def encode_pointer(segment: int, offset: int, length: int, queue_id: int | None,
                   body_size: int, tags: str | None) -> bytes:
    """The pointer to a record of ``length`` bytes at ``offset``, carrying what ``scan`` lists
    (the message's queue id, uncompressed body size and tags)."""
    raw_tags = tags.encode("utf-8")[:MAX_TAGS] if tags else b""
    return POINTER.pack(POINTER_VERSION, segment, offset, length, queue_id or 0, body_size,
                        len(raw_tags)) + raw_tags


def repoint(pointer_value: bytes, segment: int, offset: int) -> bytes:
    """The same pointer moved to ``segment``/``offset`` (relocation; the record is identical)."""
    fields = POINTER.unpack_from(pointer_value)
    return POINTER.pack(POINTER_VERSION, segment, offset, *fields[3:]) + pointer_value[SIZE:]


def pointer_or_none(value: bytes) -> Pointer | None:
    """The pointer of a well-formed pointer value; None for an inline or malformed value."""
    if len(value) < SIZE or value[0] != POINTER_VERSION:
        return None
    return Pointer(*POINTER.unpack_from(value)[1:4])


def decode_pointer(key: bytes, value: bytes) -> Pointer:
    if len(value) < SIZE:
        raise CorruptRecordError(f"timer index value of key {bytes(key).hex()} is a "
                                 f"{len(value)}-byte pointer, shorter than {SIZE}",
                                 where=bytes(key).hex(), raw=bytes(value))
    _, segment, offset, length = POINTER.unpack_from(value)[:4]
    return Pointer(segment, offset, length)


def peek(key: bytes, value: bytes) -> ValueInfo:
    """Queue id, body size and tags of an index value of either kind."""
    if not is_pointer(value):
        return peek_value(key, value)
    if len(value) < SIZE:
        decode_pointer(key, value)  # raises
    fields = POINTER.unpack_from(value)
    tags_len = fields[6]
    if len(value) != SIZE + tags_len:
        raise CorruptRecordError(f"timer index value of key {bytes(key).hex()}: pointer of "
                                 f"{len(value)} bytes, its tags length says {SIZE + tags_len}",
                                 where=bytes(key).hex(), raw=bytes(value))
    try:
        tags = bytes(value[SIZE:]).decode("utf-8") if tags_len else None
    except UnicodeDecodeError:
        raise CorruptRecordError(f"timer index value of key {bytes(key).hex()}: tags are not "
                                 f"UTF-8", where=bytes(key).hex(), raw=bytes(value)) from None
    return ValueInfo(fields[4], fields[5], tags)
