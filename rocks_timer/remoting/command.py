"""``RemotingCommand``: one frame of RocketMQ's remoting protocol, and its two header codecs.

A frame on the wire, big-endian::

    +----------+----------------------------+--------+------+
    | length 4 | serialize type 1 | hlen 3 | header | body |
    +----------+----------------------------+--------+------+

``length`` counts everything after itself. The top byte of the second word is the header's
serialize type (0 JSON, 1 ROCKETMQ binary), the low three bytes its length. The JSON header is an
object ``{code, language, version, opaque, flag, remark, extFields}``; the binary header is::

    code 2 | language 1 | version 2 | opaque 4 | flag 4 | remark len 4 | remark |
    ext len 4 | (key len 2, key, value len 4, value)*

``flag`` bit 0 marks a response, bit 1 a oneway request. A response goes back in the serialize
type of its request. Anything that does not parse is a ``FrameError``: the connection that sent
it is closed (the length prefix can no longer be trusted).
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

from rocks_timer.remoting.codes import LANGUAGE_CODES, LANGUAGES, VERSION

JSON_TYPE = 0
ROCKETMQ_TYPE = 1
RESPONSE_FLAG = 1
ONEWAY_FLAG = 2
MAX_FRAME = 16 * 1024 * 1024      # RocketMQ's default frame limit
MAX_HEADER = 1 << 20              # a header holds names and properties, never a body
PREFIX = struct.Struct(">ii")
_BINARY_FIXED = struct.Struct(">hbhii")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
# one of each, made once: ``json.dumps`` with options builds a new encoder on every call
_JSON_OUT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_JSON_IN = json.JSONDecoder()
_quote = json.encoder.encode_basestring  # a JSON string, quoted (non-ASCII kept as it is)

try:  # the JSON header written in C (rocks_timer/_native/remoting.c), when it was built
    from rocks_timer._native.codec import json_header as _native_json_header
except ImportError:  # pragma: no cover - no C compiler at install time
    _native_json_header = None


class FrameError(ValueError):
    """Bytes that are not a remoting frame: the connection is closed."""


@dataclass
class RemotingCommand:
    """One request or response. ``ext`` holds the custom header's fields as strings."""

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    language: str = "JAVA"
    version: int = VERSION
    serialize_type: int = JSON_TYPE

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    def response(self, code: int, remark: str | None = None, ext: dict | None = None,
                 body: bytes = b"") -> "RemotingCommand":
        """The answer to this request: same opaque and serialize type, response flag set.
        ``ext`` values become strings (some clients read nothing else, and every response
        carries an ``extFields`` object, even an empty one)."""
        fields = {k: v if type(v) is str else _text(v) for k, v in (ext or {}).items()
                  if v is not None}
        return RemotingCommand(code, self.opaque, RESPONSE_FLAG, remark, fields, body,
                               serialize_type=self.serialize_type)

    def encode(self) -> bytes:
        header = (_encode_binary(self) if self.serialize_type == ROCKETMQ_TYPE
                  else encode_json_header(self))
        return PREFIX.pack(4 + len(header) + len(self.body),
                           (self.serialize_type << 24) | len(header)) + header + self.body


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def encode_json_header(cmd: RemotingCommand) -> bytes:
    """The JSON header. Its fields are in name order, as RocketMQ's fastjson writes them: the
    Java client's fastjson reads a header in that order field by field, and falls back to
    looking up each name when they come in another order. Written in C where it was built
    (``_native/remoting.c``, ``json_header``), else piece by piece in Python (about 60% of the
    instructions of ``json_header``, its reference, which the tests hold both equal to); a
    header whose fields are not all text or ints goes through the reference."""
    if _native_json_header is not None and type(cmd.ext) is dict:
        header = _native_json_header(cmd.code, cmd.ext, cmd.flag, cmd.language, cmd.opaque,
                                     cmd.remark, cmd.version)
        if header is not None:
            return header
    return encode_json_header_py(cmd)


def encode_json_header_py(cmd: RemotingCommand) -> bytes:
    """``encode_json_header`` without C: piece by piece, the reference for anything else."""
    ext = cmd.ext
    if not (type(cmd.code) is type(cmd.flag) is type(cmd.opaque) is type(cmd.version) is int
            and type(cmd.language) is str
            and all([type(k) is str and type(v) is str for k, v in ext.items()])):
        return json_header(cmd)
    fields = ",".join([f"{_quote(k)}:{_quote(v)}" for k, v in ext.items()])
    remark = "" if cmd.remark is None else f',"remark":{_quote(cmd.remark)}'
    return (f'{{"code":{cmd.code},"extFields":{{{fields}}},"flag":{cmd.flag},'
            f'"language":{_quote(cmd.language)},"opaque":{cmd.opaque}{remark},'
            f'"serializeTypeCurrentRPC":"JSON","version":{cmd.version}}}').encode("utf-8")


def json_header(cmd: RemotingCommand) -> bytes:
    """The JSON header by the json module: the reference ``encode_json_header`` is held to."""
    header = {"code": cmd.code, "extFields": cmd.ext, "flag": cmd.flag,
              "language": cmd.language, "opaque": cmd.opaque}
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = cmd.version
    return _JSON_OUT.encode(header).encode("utf-8")


def _encode_binary(cmd: RemotingCommand) -> bytes:
    parts = [_BINARY_FIXED.pack(cmd.code, LANGUAGE_CODES.get(cmd.language, 0), cmd.version,
                                cmd.opaque, cmd.flag)]
    remark = (cmd.remark or "").encode("utf-8")
    parts += [_I32.pack(len(remark)), remark]
    ext = bytearray()
    for key, value in cmd.ext.items():
        k, v = key.encode("utf-8"), value.encode("utf-8")
        ext += _I16.pack(len(k)) + k + _I32.pack(len(v)) + v
    parts += [_I32.pack(len(ext)), bytes(ext)]
    return b"".join(parts)


def frame_size(prefix: bytes) -> tuple[int, int]:
    """(bytes after the 4-byte length, header length) from a frame's first 8 bytes; raises
    ``FrameError`` for sizes no frame has."""
    total, mark = PREFIX.unpack(prefix)
    header_len = mark & 0xFFFFFF
    if not 4 <= total <= MAX_FRAME:
        raise FrameError(f"frame length {total} is outside 4..{MAX_FRAME}")
    if header_len > min(total - 4, MAX_HEADER):
        raise FrameError(f"header length {header_len} does not fit a frame of {total} bytes")
    if (mark >> 24) & 0xFF not in (JSON_TYPE, ROCKETMQ_TYPE):
        raise FrameError(f"unknown serialize type {(mark >> 24) & 0xFF}")
    return total, header_len


def decode(mark: int, rest: bytes) -> RemotingCommand:
    """A command from its header mark word and the bytes after it (header, then body)."""
    kind, header_len = (mark >> 24) & 0xFF, mark & 0xFFFFFF
    header, body = rest[:header_len], rest[header_len:]
    cmd = _decode_binary(header) if kind == ROCKETMQ_TYPE else _decode_json(header)
    cmd.body = bytes(body)
    cmd.serialize_type = kind
    return cmd


def _int(value, name: str) -> int:
    if type(value) is int:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise FrameError(f"header field {name} is not an integer: {value!r}")
    try:
        return int(value)
    except ValueError:
        raise FrameError(f"header field {name} is not an integer: {value!r}") from None


def _decode_json(header: bytes) -> RemotingCommand:
    try:
        doc = _JSON_IN.decode(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"the JSON header does not parse: {exc}") from None
    if not isinstance(doc, dict) or "code" not in doc:
        raise FrameError("the JSON header is not an object with a code")
    raw_ext = doc.get("extFields") or {}
    if not isinstance(raw_ext, dict):
        raise FrameError("extFields is not an object")
    # clients send some numbers as JSON numbers and others as strings: keep text (the Java
    # client sends only strings: then the object is kept as it is)
    ext = raw_ext
    if not all([type(v) is str for v in raw_ext.values()]):
        ext = {str(k): (v if isinstance(v, str) else json.dumps(v)
                        if isinstance(v, (bool, dict, list)) else str(v))
               for k, v in raw_ext.items() if v is not None}
    remark = doc.get("remark")
    language = doc.get("language")
    return RemotingCommand(_int(doc["code"], "code"), _int(doc.get("opaque", 0), "opaque"),
                           _int(doc.get("flag", 0), "flag"),
                           remark if isinstance(remark, str) else None, ext, b"",
                           language if isinstance(language, str) else "OTHER",
                           _int(doc.get("version", 0), "version"))


def _decode_binary(header: bytes) -> RemotingCommand:
    try:
        code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
        at = _BINARY_FIXED.size
        remark, at = _read(header, at, _I32)
        ext_len, = _I32.unpack_from(header, at)
        at += 4
        if ext_len < 0 or at + ext_len > len(header):
            raise FrameError(f"extFields length {ext_len} overruns the header")
        end, ext = at + ext_len, {}
        while at < end:
            key, at = _read(header, at, _I16)
            value, at = _read(header, at, _I32)
            ext[key.decode("utf-8")] = value.decode("utf-8")
        if at != end:
            raise FrameError("extFields overrun their length")
    except (struct.error, UnicodeDecodeError) as exc:
        raise FrameError(f"the binary header does not parse: {exc}") from None
    return RemotingCommand(code=code, opaque=opaque, flag=flag,
                           remark=remark.decode("utf-8", "replace") or None, ext=ext,
                           language=LANGUAGES[language] if 0 <= language < len(LANGUAGES)
                           else "OTHER", version=version)


def _read(buf: bytes, at: int, length: struct.Struct) -> tuple[bytes, int]:
    n, = length.unpack_from(buf, at)
    at += length.size
    if n < 0 or at + n > len(buf):
        raise FrameError(f"a string of {n} bytes overruns the header")
    return buf[at:at + n], at + n


__all__ = ["RemotingCommand", "FrameError", "decode", "frame_size", "MAX_FRAME",
           "JSON_TYPE", "ROCKETMQ_TYPE"]
