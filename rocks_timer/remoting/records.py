"""Message bytes as 4.x clients read and write them.

Pull responses carry stored messages concatenated in RocketMQ's V1 layout (the CommitLog record
layout of ``rocks_timer.record``, IPv4 hosts), with two fields set for the client: ``bodyCRC`` is
the CRC32 of the body alone masked to 31 bits (what RocketMQ's ``UtilAll.crc32`` gives; rtimer's
own record CRC covers the whole record), and ``storeHost`` is this front's address, where the
client sends CONSUMER_SEND_MSG_BACK. ``physicalOffset`` is the CommitLog offset, which is how a
send-back names its message.

A batch send's body is the client's messages one after another, each::

    totalSize 4 | magic 4 | bodyCRC 4 | flag 4 | bodyLen 4 | body | propsLen 2 | properties
"""
from __future__ import annotations

import socket
import struct
import zlib

from rocks_timer.message import UNIQ_KEY, Message, decode_properties, encode_properties

MESSAGE_MAGIC = 0xDAA320A7
CLIENT_UNIQ_KEY = "CLIENT_UNIQ_KEY"  # see producing: shown to clients as their UNIQ_KEY
_HEAD = struct.Struct(">iIIiiqqiq4sIq4sIiqi")  # .. bodyLen
_BATCH_HEAD = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLen
_PROPS_LEN = struct.Struct(">H")
_OFFSET_ID = struct.Struct(">4sIq")

# sysFlag bits of a sent message (MessageSysFlag)
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_MASK = 0xC
COMPRESSION_TYPE_MASK = 0x7 << 8
COMPRESSION_LZ4 = 0x1 << 8
COMPRESSION_ZSTD = 0x2 << 8
COMPRESSION_ZLIB = 0x3 << 8


class BodyError(ValueError):
    """A body or batch that cannot be decoded."""


def ipv4(host: str) -> bytes:
    """The 4 address bytes of ``host`` (resolved; a wildcard becomes this machine's address)."""
    if host in ("", "0.0.0.0"):
        try:
            host = socket.gethostbyname(socket.gethostname())
        except OSError:
            host = "127.0.0.1"
    try:
        return socket.inet_aton(socket.gethostbyname(host))
    except OSError:
        return socket.inet_aton("127.0.0.1")


def offset_msg_id(host: bytes, port: int, commitlog_offset: int) -> str:
    """RocketMQ's offset message id: store host, port and CommitLog offset as 32 hex digits."""
    return _OFFSET_ID.pack(host, port, commitlog_offset).hex().upper()


def parse_offset_msg_id(text: str) -> int | None:
    """The CommitLog offset an offset message id names (None if ``text`` is not one)."""
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        return None
    if len(raw) != 16:
        return None
    return _OFFSET_ID.unpack(raw)[2]


def encode_for_client(msg: Message, host: bytes, port: int) -> bytes:
    """One pulled message in the V1 layout clients decode."""
    if CLIENT_UNIQ_KEY in msg.properties:
        shown = dict(msg.properties)
        shown[UNIQ_KEY] = shown.pop(CLIENT_UNIQ_KEY)
        props = encode_properties(shown)
    else:
        props = msg.encoded_properties
    topic = msg.topic.encode("utf-8")
    body = msg.body
    size = _HEAD.size + len(body) + 1 + len(topic) + 2 + len(props)
    head = _HEAD.pack(size, MESSAGE_MAGIC, zlib.crc32(body) & 0x7FFFFFFF, msg.queue_id or 0,
                      msg.flag, msg.queue_offset or 0, msg.commitlog_offset or 0, 0,
                      msg.born_ms or 0, host, 0, msg.store_ms or 0, host, port,
                      msg.reconsume_times, 0, len(body))
    return b"".join((head, body, bytes([len(topic)]), topic, _PROPS_LEN.pack(len(props)), props))


def uncompress(body: bytes, sys_flag: int, limit: int) -> bytes:
    """A sent body as the producer wrote it: clients compress bodies over 4 KiB (zlib unless
    told otherwise); rtimer stores them plain. ``limit`` bounds what one may inflate to."""
    if not sys_flag & COMPRESSED_FLAG:
        return body
    kind = sys_flag & COMPRESSION_TYPE_MASK
    try:
        if kind in (0, COMPRESSION_ZLIB):
            inflater = zlib.decompressobj()
            plain = inflater.decompress(body, limit + 1)
            if len(plain) > limit or inflater.unconsumed_tail:
                raise BodyError(f"the compressed body inflates past {limit} bytes")
            return plain
        if kind == COMPRESSION_LZ4:
            import lz4.frame
            plain = lz4.frame.decompress(body)
            if len(plain) > limit:
                raise BodyError(f"the compressed body inflates past {limit} bytes")
            return plain
    except (zlib.error, RuntimeError, ValueError) as exc:
        if isinstance(exc, BodyError):
            raise
        raise BodyError(f"the compressed body does not inflate: {exc}") from None
    raise BodyError(f"compression type {kind >> 8} is not supported (zlib and lz4 are)")


def decode_batch(data: bytes, max_messages: int) -> list[tuple[int, bytes, dict[str, str]]]:
    """(flag, body, properties) of each message of a SEND_BATCH_MESSAGE body."""
    out, at = [], 0
    while at < len(data):
        if len(out) >= max_messages:
            raise BodyError(f"a batch holds more than {max_messages} messages")
        try:
            total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(data, at)
        except struct.error:
            raise BodyError(f"a batch entry at byte {at} is truncated") from None
        body_at = at + _BATCH_HEAD.size
        if body_len < 0 or body_at + body_len + 2 > len(data):
            raise BodyError(f"a batch entry at byte {at} has a body length {body_len} that "
                            "overruns the batch")
        body = data[body_at:body_at + body_len]
        (props_len,) = _PROPS_LEN.unpack_from(data, body_at + body_len)
        props_at = body_at + body_len + 2
        end = props_at + props_len
        if end > len(data) or total != end - at:
            raise BodyError(f"a batch entry at byte {at} has lengths that do not add up")
        try:
            props = decode_properties(data[props_at:end])
        except (UnicodeDecodeError, ValueError):
            raise BodyError(f"a batch entry at byte {at} has unreadable properties") from None
        out.append((flag, bytes(body), props))
        at = end
    if not out:
        raise BodyError("the batch is empty")
    return out


__all__ = ["encode_for_client", "decode_batch", "uncompress", "offset_msg_id",
           "parse_offset_msg_id", "ipv4", "BodyError"]
