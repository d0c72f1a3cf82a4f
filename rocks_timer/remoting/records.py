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

from rocks_timer.message import KEYS, UNIQ_KEY, Message, decode_properties, encode_properties

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


_ROW = 9  # the index row of rocks_timer.consume_read (PulledBatch.records)
_CLIENT_FIELDS = ((8, 4), (36, 4), (48, 8), (64, 8), (76, 8))  # what the client sees differently
_U32 = struct.Struct(">I")
_HOST_PORT = struct.Struct(">4sI")
_CLIENT_NAME = CLIENT_UNIQ_KEY.encode()
_CLIENT_ENTRY = _CLIENT_NAME + b"\x01"
_UNIQ_NAME = UNIQ_KEY.encode()
_KEYS_NAME = KEYS.encode()
MAX_RENAMED_ENTRIES = 64  # a longer property string is renamed message by message (O(n))


def shown_properties(props: bytes) -> bytes | None:
    """A stored record's property string as a client is shown it (what ``encode_for_client``
    writes): the same bytes, unless an entry is ``CLIENT_UNIQ_KEY``; then that entry is left
    out and its value shown as ``UNIQ_KEY`` (in UNIQ_KEY's place, else last). The rename is
    done on the bytes only for the form rtimer writes (every entry ``name\\x01value\\x02``,
    both parts non-empty, no second ``\\x01``, names unique, KEYS already normalised, at most
    ``MAX_RENAMED_ENTRIES`` entries); anything else answers None and the page is encoded
    message by message. The shown string is shorter than the stored one (a UNIQ_KEY entry is 7
    bytes shorter than the CLIENT_UNIQ_KEY entry whose value it shows). The reference of the
    rename in ``rocks_timer/_native/client_records.c``."""
    if not (props.startswith(_CLIENT_ENTRY) or b"\x02" + _CLIENT_ENTRY in props):
        return props
    parts = props.split(b"\x02")
    if parts[-1] or len(parts) - 1 > MAX_RENAMED_ENTRIES:
        return None
    entries, client = [], None
    for part in parts[:-1]:
        name, sep, value = part.partition(b"\x01")
        if not (sep and name and value) or b"\x01" in value:
            return None
        if name == _KEYS_NAME and value.strip(b" ") and (
                value[:1] == b" " or value[-1:] == b" " or b"  " in value):
            return None  # the reader normalises KEYS: such bytes would not be shown as stored
        entries.append((name, value))
        if name == _CLIENT_NAME:
            client = value
    names = [name for name, _ in entries]
    if len(set(names)) != len(names):
        return None
    out = [name + b"\x01" + (client if name == _UNIQ_NAME else value) + b"\x02"
           for name, value in entries if name != _CLIENT_NAME]
    if _UNIQ_NAME not in names:
        out.append(_UNIQ_NAME + b"\x01" + client + b"\x02")
    return b"".join(out)


def client_records_py(blob: bytes, index, host: bytes, port: int) -> bytes | None:
    """The records of a pulled page (``PulledBatch.records()``) in the V1 layout clients decode:
    each stored record copied whole with five fields set for the client, as
    ``encode_for_client`` writes them: ``bodyCRC`` (CRC32 of the body, 31 bits), ``sysFlag``
    0, ``bornHost`` this front's address with port 0, ``storeHost`` this front's address and
    port, ``preparedTransactionOffset`` 0; a record with ``CLIENT_UNIQ_KEY`` gets its property
    string as ``shown_properties`` gives it (and its sizes changed to match), or, if that is
    None, the whole page answers None (encode it message by message). The reference of the
    native ``client_records`` (``rocks_timer/_native/client_records.c``); byte for byte what
    ``encode_for_client`` gives for the records rtimer writes."""
    rows = memoryview(index).cast("B").cast("q")
    if len(host) != 4:
        raise ValueError(f"host must be 4 bytes, not {len(host)}")
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is outside 0..65535")
    if len(rows) % _ROW:
        raise ValueError(f"the index holds {len(rows)} int64, not whole rows of {_ROW}")
    for k in range(0, len(rows), _ROW):
        at, size, body_at, body_len = rows[k + 1], rows[k + 2], rows[k + 3], rows[k + 4]
        props_at, props_len = rows[k + 7], rows[k + 8]
        if (size < 91 or at < 0 or at + size > len(blob) or body_at < at + 88
                or body_len < 0 or body_at + body_len > at + size
                or props_at < body_at + body_len + 3 or props_len < 0
                or props_at + props_len != at + size):
            raise ValueError(f"index row {k // _ROW} does not fit the buffer")
    out = bytearray()
    born, store = _HOST_PORT.pack(host, 0), _HOST_PORT.pack(host, port)
    for k in range(0, len(rows), _ROW):
        at, size, body_at, body_len = rows[k + 1], rows[k + 2], rows[k + 3], rows[k + 4]
        props_at, props_len = rows[k + 7], rows[k + 8]
        props = blob[props_at:props_at + props_len]
        shown = shown_properties(props)
        if shown is None:
            return None
        start = len(out)
        if shown is props:
            out += blob[at:at + size]
        else:
            out += blob[at:props_at - 2]
            out += _PROPS_LEN.pack(len(shown)) + shown
            _U32.pack_into(out, start, len(out) - start)
        _U32.pack_into(out, start + 8, zlib.crc32(blob[body_at:body_at + body_len]) & 0x7FFFFFFF)
        out[start + 36:start + 40] = bytes(4)
        out[start + 48:start + 56] = born
        out[start + 64:start + 72] = store
        out[start + 76:start + 84] = bytes(8)
    return bytes(out)


try:  # the same in C, when it was built (tests/fronts/test_remoting_records.py: byte for byte)
    from rocks_timer._native.codec import client_records as _native_client_records
except ImportError:  # pragma: no cover - no C compiler at install time
    _native_client_records = None

client_records = _native_client_records or client_records_py


def encode_page_for_client(batch, host: bytes, port: int) -> bytes:
    """A pulled page (``Broker.pull_batch``) in the V1 layout, as ``encode_for_client`` of each
    message gives it: whole records copied (``client_records``; a ``CLIENT_UNIQ_KEY``, which
    the Java client's 56-digit ids leave on every message of a host it names by IPv6, renamed
    on the bytes), else, when ``client_records`` declines the page, message by message."""
    blob, index = batch.records()
    shown = client_records(blob, index, host, port)
    if shown is None:
        return b"".join([encode_for_client(batch.message(i), host, port)
                         for i in range(len(batch))])
    return shown


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


__all__ = ["encode_for_client", "encode_page_for_client", "client_records",
           "client_records_py", "decode_batch", "uncompress", "offset_msg_id",
           "parse_offset_msg_id", "ipv4", "BodyError"]
