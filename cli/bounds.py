"""The bounds of every op's arguments, one table for both ways in: the CLI's options and the
running broker's socket (ARCHITECTURE §4: a socket request is held to the same limits as the CLI).

:func:`check` refuses an unknown argument name, a value of the wrong type, or a number out of
its range, with an :class:`~rocks_timer.errors.InvalidArgumentError` naming the argument, the
value and what is allowed. Values the library checks itself (topics, delays against
``timer_max_delay_sec``, handles) are left to it.
"""
from __future__ import annotations

from typing import Any

from rocks_timer.errors import InvalidArgumentError, InvalidMessageError
from rocks_timer.timer.handles import TOPIC_PATTERN

SCAN_PAGE = 1_000  # entries a listing reads per library call

SEND_MAX_COUNT = 100_000
SCAN_MAX_LIMIT = 1_000_000
FIND_MAX_LIMIT = 1_000_000
DUE_MAX_DAYS = 400  # rocks_timer.timer.histogram.MAX_DAYS
CONSUME_MAX_MESSAGES = 10_000
MAX_QUEUE_ID = 1023
CANCEL_MAX_HANDLES = 10_000
MAX_EPOCH_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
MAX_TEXT_ITEMS = 1_000  # keys, properties

_INT, _TEXT, _BOOL = "int", "text", "bool"


def check_topic(topic: str) -> str:
    if not TOPIC_PATTERN.match(topic):
        raise InvalidMessageError(f"topic {topic!r} is invalid; it must match "
                                  "^[%|a-zA-Z0-9_-]{1,127}$")
    return topic

# op -> argument -> (kind, low, high, may be None)
ARGUMENTS: dict[str, dict[str, tuple[str, int | None, int | None, bool]]] = {
    "send": {"topic": (_TEXT, None, None, False), "body": (_TEXT, None, None, True),
             "body_base64": (_TEXT, None, None, True),
             "delay_ms": (_INT, 0, MAX_EPOCH_MS, True),
             "deliver_at_ms": (_INT, 0, MAX_EPOCH_MS, True),
             "delay_level": (_INT, 1, 1_000, True), "tags": (_TEXT, None, None, True),
             "keys": ("text-list", 0, MAX_TEXT_ITEMS, True),
             "properties": ("text-map", 0, MAX_TEXT_ITEMS, True),
             "count": (_INT, 1, SEND_MAX_COUNT, False)},
    "scan": {"from_ms": (_INT, 0, MAX_EPOCH_MS, True), "to_ms": (_INT, 0, MAX_EPOCH_MS, True),
             "topic": (_TEXT, None, None, True), "limit": (_INT, 0, SCAN_MAX_LIMIT, False)},
    "cancel": {"handles": ("text-list", 1, CANCEL_MAX_HANDLES, False)},
    "consume": {"topic": (_TEXT, None, None, False), "group": (_TEXT, None, None, False),
                "queue_id": (_INT, 0, MAX_QUEUE_ID, False),
                "max_messages": (_INT, 1, CONSUME_MAX_MESSAGES, False),
                "deliver": (_BOOL, None, None, False)},
    "stats": {},
    "compact": {},
    "check": {},
    "set_aside_list": {},
    "set_aside_export": {"directory": (_TEXT, None, None, False),
                         "msg_ids": ("text-list", 0, MAX_TEXT_ITEMS, True)},
    "set_aside_restore": {"msg_ids": ("text-list", 0, MAX_TEXT_ITEMS, True)},
    "lost_list": {},
    "lost_accept": {},
    "find": {"topic": (_TEXT, None, None, False), "key": (_TEXT, None, None, False),
             "limit": (_INT, 0, FIND_MAX_LIMIT, False)},
    "cancel_by_key": {"topic": (_TEXT, None, None, False), "key": (_TEXT, None, None, False)},
    "reschedule": {"handles": ("text-list", 0, CANCEL_MAX_HANDLES, True),
                   "topic": (_TEXT, None, None, True), "key": (_TEXT, None, None, True),
                   "deliver_at_ms": (_INT, 0, MAX_EPOCH_MS, True),
                   "delay_ms": (_INT, 0, MAX_EPOCH_MS, True)},
    "due": {"first_day_ms": (_INT, 0, MAX_EPOCH_MS, True), "days": (_INT, 0, DUE_MAX_DAYS, False)},
}


def check(op: str, args: Any) -> dict[str, Any]:
    """``args`` if every argument of ``op`` is known, typed and in range; raises otherwise."""
    allowed = ARGUMENTS.get(op)
    if allowed is None:
        raise InvalidArgumentError(f"unknown op {op!r}; known: {', '.join(ARGUMENTS)}")
    if not isinstance(args, dict):
        raise InvalidArgumentError(f"{op}: args must be an object, got {type(args).__name__}")
    unknown = sorted(set(args) - set(allowed))
    if unknown:
        raise InvalidArgumentError(f"{op}: unknown argument(s) {', '.join(map(str, unknown))}; "
                                   f"allowed: {', '.join(allowed) or 'none'}")
    for name, value in args.items():
        kind, low, high, nullable = allowed[name]
        if value is None and nullable:
            continue
        _check_value(op, name, value, kind, low, high)
    return args


def _check_value(op: str, name: str, value: Any, kind: str, low: int | None,
                 high: int | None) -> None:
    def refuse(allowed: str) -> None:
        raise InvalidArgumentError(f"{op}: {name}={value!r:.80} is invalid; allowed: {allowed}")

    if kind == _INT:
        if isinstance(value, bool) or not isinstance(value, int):
            refuse(f"an integer in {low}..{high}")
        if not low <= value <= high:  # type: ignore[operator]
            refuse(f"{low}..{high}")
    elif kind == _BOOL:
        if not isinstance(value, bool):
            refuse("true or false")
    elif kind == _TEXT:
        if not isinstance(value, str):
            refuse("a string")
    elif kind == "text-list":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            refuse("a list of strings")
        if not low <= len(value) <= high:  # type: ignore[operator]
            refuse(f"{low}..{high} items")
    elif kind == "text-map":
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            refuse("an object of string values")
        if len(value) > high:  # type: ignore[operator]
            refuse(f"at most {high} entries")
