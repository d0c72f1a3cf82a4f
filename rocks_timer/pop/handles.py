"""Receipt handles of pop consumption, and the names of a group's retry and dead-letter topics.

A receipt handle is ``base64url("r1 <group> <topic> <commitlog offset> <size> <timer handle>")``
without padding: the consumer group and topic it was received for, where the received message
sits in the CommitLog (so change-invisible-duration can rebuild its invisibility record), and the
cancel handle of that record in the timer engine (so an ack is a cancel). The handle is opaque to
clients; a decoded handle is still checked against the group and topic of the request and against
the record's topic, so a forged handle can never cancel another group's record or a user's timer
message.
"""
from __future__ import annotations

import binascii
import hashlib
import re
from dataclasses import dataclass

from rocks_timer.errors import InvalidHandleError
from rocks_timer.timer.handles import TOPIC_PATTERN, Handle, b64url_decode

VERSION = "r1"
GROUP_PATTERN = re.compile(r"^[%a-zA-Z0-9_-]{1,255}$")
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
_MAX_HANDLE = 1200
_URLSAFE = bytes.maketrans(b"+/", b"-_")


def retry_topic(group: str, topic: str) -> str:
    """RocketMQ's pop retry topic (``%RETRY%<group>_<topic>``), hashed when too long."""
    name = f"{RETRY_PREFIX}{group}_{topic}"
    if len(name) <= 127:
        return name
    return RETRY_PREFIX + hashlib.sha1(f"{group}\x00{topic}".encode()).hexdigest()


def dlq_topic(group: str) -> str:
    """The group's dead-letter topic (``%DLQ%<group>``), hashed when too long."""
    name = f"{DLQ_PREFIX}{group}"
    if len(name) <= 127:
        return name
    return DLQ_PREFIX + hashlib.sha1(group.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    group: str
    topic: str
    commitlog_offset: int
    size: int
    timer_handle: str

    def encode(self) -> str:
        text = (f"{VERSION} {self.group} {self.topic} {self.commitlog_offset} {self.size} "
                f"{self.timer_handle}")
        # one per popped message: binascii and a translation, not base64's wrappers
        return binascii.b2a_base64(text.encode("ascii"), newline=False).translate(
            _URLSAFE).rstrip(b"=").decode("ascii")

    @property
    def timer(self) -> Handle:
        return Handle.decode(self.timer_handle)

    @classmethod
    def decode(cls, handle: object) -> "ReceiptHandle":
        return cls.parse(handle)[0]

    @classmethod
    def parse(cls, handle: object) -> "tuple[ReceiptHandle, Handle]":
        """The receipt handle and its decoded timer handle (decoded once: an ack needs both);
        InvalidHandleError when either is malformed."""
        if not isinstance(handle, str) or not handle or len(handle) > _MAX_HANDLE:
            raise InvalidHandleError(f"receipt handle {str(handle)[:80]!r} is not one of ours")
        try:
            text = b64url_decode(handle).decode("ascii")
        except (binascii.Error, UnicodeError, ValueError):
            raise InvalidHandleError(f"receipt handle {handle[:80]!r} is not base64url") from None
        parts = text.split(" ")
        if len(parts) != 6 or parts[0] != VERSION:
            raise InvalidHandleError(f"receipt handle {handle[:80]!r} is not an r1 handle")
        _, group, topic, offset, size, timer_handle = parts
        if (not GROUP_PATTERN.match(group) or not TOPIC_PATTERN.match(topic)
                or not offset.isdigit() or not size.isdigit()):
            raise InvalidHandleError(f"receipt handle {handle[:80]!r} has a malformed field")
        timer = Handle.decode(timer_handle)  # raises InvalidHandleError when malformed
        return cls(group, topic, int(offset), int(size), timer_handle), timer

    def check(self, group: str, topic: str, timer: Handle | None = None) -> Handle:
        """The timer handle (``timer``: decoded already by :meth:`parse`), once the handle is
        known to belong to ``group`` and ``topic``."""
        if self.group != group:
            raise InvalidHandleError(f"receipt handle was issued to group {self.group!r}, "
                                     f"not {group!r}")
        if self.topic != topic:
            raise InvalidHandleError(f"receipt handle was issued for topic {self.topic!r}, "
                                     f"not {topic!r}")
        if timer is None:
            timer = self.timer
        if timer.topic != retry_topic(group, topic) and timer.topic != dlq_topic(group):
            raise InvalidHandleError("receipt handle does not name an invisibility record")
        return timer
