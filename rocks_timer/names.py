"""The naming rules of topics and message keys, the ground every floor validates with: the
send path (``routing``), the handle codec (``timer.handles``), the key codec (``timer.keys``)
and the fronts. It imports only ground modules (docs/DECISIONS.md "Import contracts")."""
from __future__ import annotations

import re

from rocks_timer.errors import InvalidMessageError
from rocks_timer.message import is_system_topic

TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")
MAX_KEY_BYTES = (1 << 16) - 1  # the key index stores a key's length in 2 bytes
# C0 controls, DEL and C1 controls: never part of a key (KEYS separates keys by spaces, and a
# key is typed on command lines and printed on terminals)
KEY_REFUSED = re.compile(r"[ \x00-\x1f\x7f-\x9f]")


def validate_topic(topic: object) -> str:
    if not isinstance(topic, str) or not TOPIC_PATTERN.match(topic):
        raise InvalidMessageError(
            f"topic {topic!r} is invalid; it must match ^[%|a-zA-Z0-9_-]{{1,127}}$")
    if is_system_topic(topic):
        raise InvalidMessageError(f"topic {topic!r} is a system topic; producers may not send to it")
    return topic


def validate_key(key: object) -> str:
    """``key`` if it is a message key that can be sent, found, cancelled and rescheduled by:
    a non-empty string of at most ``MAX_KEY_BYTES`` UTF-8 bytes with no space (RocketMQ's
    KEYS separator) and no control character; InvalidMessageError naming it otherwise.

    The same rule for a send's keys and for the key ``find`` is asked for: a key accepted at
    send that find refuses could never be found or cancelled, and a key with a space would
    be stored as one key and read back as two."""
    if not isinstance(key, str):
        raise InvalidMessageError(f"key {key!r} is not a string")
    if not key or KEY_REFUSED.search(key):
        raise InvalidMessageError(f"key {key!r:.80} is empty or holds a space or a control "
                                  f"character (KEYS separates keys by spaces)")
    if len(key) * 4 > MAX_KEY_BYTES and len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise InvalidMessageError(f"key of {len(key.encode('utf-8'))} bytes exceeds "
                                  f"{MAX_KEY_BYTES} bytes")
    return key
