"""Cancel handles: an opaque, URL-safe string naming one scheduled message.

A handle is ``base64url("v1 <topic> <due_ms> <msg_id>")`` without padding, the shape of RocketMQ's
recall handle (minus the broker name). ``due_ms`` is the due time of the engine's key: for the
RocksDB engine the (possibly clamped) key time; for the wheel TIMER_OUT_MS + 1, as RocketMQ does.
"""
from __future__ import annotations

import binascii
import re
from dataclasses import dataclass

from rocks_timer.errors import InvalidHandleError
from rocks_timer.names import TOPIC_PATTERN  # also imported from here by the fronts and the CLI

_MSG_ID = re.compile(r"^[0-9A-F]{32}$")
VERSION = "v1"


@dataclass(frozen=True, slots=True)
class Handle:
    topic: str
    due_ms: int
    msg_id: str

    def encode(self) -> str:
        return encode_handle(self.topic, self.due_ms, self.msg_id)

    @classmethod
    def decode(cls, handle: str) -> "Handle":
        if not isinstance(handle, str) or not handle or len(handle) > 400:
            raise InvalidHandleError(f"handle {handle!r} is not a rocks-timer handle")
        try:
            text = b64url_decode(handle).decode("ascii")
        except (binascii.Error, UnicodeError, ValueError):
            raise InvalidHandleError(f"handle {handle!r} is not valid base64url") from None
        parts = text.split(" ")
        if len(parts) != 4 or parts[0] != VERSION:
            raise InvalidHandleError(f"handle {handle!r} does not decode to 'v1 topic due_ms msg_id'")
        _, topic, due_text, msg_id = parts
        if not TOPIC_PATTERN.match(topic) or not due_text.isdigit() or not _MSG_ID.match(msg_id):
            raise InvalidHandleError(f"handle {handle!r} has a malformed topic, due time or id")
        return cls(topic, int(due_text), msg_id)


_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")


def b64url_decode(text: str) -> bytes:
    """``base64.urlsafe_b64decode`` of ``text`` with its padding restored, without base64's
    wrappers (a handle is decoded on every ack and cancel): the same translation and the same
    lenient ``binascii.a2b_base64``. A ValueError where base64 raises one (UnicodeError for a
    non-ASCII text, binascii.Error for bad base64; tests/engines/test_handles_codec.py holds it
    to base64's)."""
    padded = text + "=" * (-len(text) % 4)
    return binascii.a2b_base64(padded.encode("ascii").translate(_FROM_URLSAFE))


def encode_handle(topic: str, due_ms: int, msg_id: str) -> str:
    # on the schedule hot path: no Handle object, binascii instead of base64's wrappers
    text = f"{VERSION} {topic} {due_ms} {msg_id}".encode("ascii")
    return binascii.b2a_base64(text, newline=False).translate(_URLSAFE).rstrip(b"=").decode("ascii")


def decode_handle(handle: str) -> Handle:
    return Handle.decode(handle)
