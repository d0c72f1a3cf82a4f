"""Reading a request's custom header (its ``extFields``) with range checks.

``SEND_MESSAGE_V2`` and ``SEND_BATCH_MESSAGE`` carry the send header under one-letter names
(``a`` .. ``n``, RocketMQ's ``SendMessageRequestHeaderV2``); ``Header.send`` reads either form
under the long names (a V2 field by its letter first, without copying the fields). A missing
or malformed field is a ``HeaderError``, which the front answers with a RocketMQ error code (the
connection stays open).
"""
from __future__ import annotations

from rocks_timer.errors import RocksTimerError
from rocks_timer.timer.handles import TOPIC_PATTERN

V2_NAMES = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
            "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties",
            "j": "reconsumeTimes", "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch",
            "n": "brokerName"}
_I32_MAX = 2**31 - 1
_I64_MAX = 2**63 - 1


class HeaderError(RocksTimerError, ValueError):
    """A request header field is missing or out of range."""


V2_LETTERS = {name: letter for letter, name in V2_NAMES.items()}


class Header:
    """A request's ext fields with typed, bounded getters. ``letters`` maps a field's long name
    to the name it came under (V2's one letter); a field not found under it is looked up
    under its long name."""

    def __init__(self, ext: dict[str, str], letters: dict[str, str] | None = None):
        self.ext = ext
        self.letters = letters

    @classmethod
    def send(cls, code_v2: bool, ext: dict[str, str]) -> "Header":
        return cls(ext, V2_LETTERS if code_v2 else None)

    def get(self, name: str) -> str | None:
        """The field ``name`` as sent, or None."""
        if self.letters is not None:
            value = self.ext.get(self.letters.get(name, name))
            if value is not None:
                return value
        return self.ext.get(name)

    def text(self, name: str, default: str | None = None, *, max_len: int = 65_536) -> str:
        value = self.get(name)
        if value is None:
            if default is None:
                raise HeaderError(f"the request header lacks {name}")
            return default
        if len(value) > max_len:
            raise HeaderError(f"header field {name} is longer than {max_len}")
        return value

    def integer(self, name: str, default: int | None = None, *, low: int = -_I64_MAX - 1,
                high: int = _I64_MAX) -> int:
        value = self.get(name)
        if value is None or value == "" or value == "null":
            if default is None:
                raise HeaderError(f"the request header lacks {name}")
            return default
        try:
            number = int(value)
        except ValueError:
            raise HeaderError(f"header field {name}={value[:40]!r} is not an integer") from None
        if not low <= number <= high:
            raise HeaderError(f"header field {name}={number} is outside {low}..{high}")
        return number

    def queue_id(self, name: str = "queueId") -> int:
        return self.integer(name, low=0, high=_I32_MAX)

    def offset(self, name: str) -> int:
        return self.integer(name, low=0)

    def topic(self, name: str = "topic") -> str:
        return check_name(self.text(name, max_len=255), "topic")

    def group(self, name: str) -> str:
        return check_name(self.text(name, max_len=255), "group")

    def flag(self, name: str, default: bool = False) -> bool:
        value = self.get(name)
        # Java writes true/false, the C++ client 1/0
        return default if value is None else value.strip().lower() in ("true", "1")


def check_name(value: str, what: str) -> str:
    if not TOPIC_PATTERN.match(value):
        raise HeaderError(f"{what} {value[:130]!r} is invalid; it must match "
                          "^[%|a-zA-Z0-9_-]{1,127}$")
    return value


__all__ = ["Header", "HeaderError", "check_name", "V2_NAMES"]
