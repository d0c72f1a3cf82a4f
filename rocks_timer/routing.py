"""Validation and routing of a send: the one place that decides where a message goes
(docs/ARCHITECTURE.md §3).

1. ``DELAY`` > 0 wins: TIMER_* dropped, level clamped, stored on SCHEDULE_TOPIC_XXXX queue level-1.
2. Otherwise the due time D comes from TIMER_DELAY_SEC, then TIMER_DELAY_MS, then TIMER_DELIVER_MS.
3. D <= now: stored on the real topic at once.
4. D - now > the max delay: ``DelayOutOfRangeError``; exactly the maximum is accepted.
5. Otherwise the timer engine parks it until D.

Names a producer gives are checked here too, once for every way in (library, CLI, the Unix
socket, the gRPC and remoting fronts): :func:`validate_topic` and :func:`validate_key` (the
rule ``find``, ``cancel --key`` and ``reschedule --key`` apply to the key they are given).
"""
from __future__ import annotations

import datetime as dt
import re
from typing import Any, Callable, Literal, NamedTuple, Sequence

from rocks_timer.config import BrokerConfig
from rocks_timer.errors import DelayOutOfRangeError, InvalidMessageError
from rocks_timer.message import (BROKER_OWNED_PROPERTIES, DELAY, NAME_VALUE_SEPARATOR,
                                 PROPERTY_SEPARATOR, REAL_QID, REAL_TOPIC, SCHEDULE_TOPIC,
                                 TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS,
                                 TIMER_PROPERTIES, UNIQ_KEY, Message, new_msg_id)
# validate_key, validate_topic and MAX_KEY_BYTES are also imported from here (the send rules)
from rocks_timer.names import KEY_REFUSED, MAX_KEY_BYTES, validate_key, validate_topic
from rocks_timer.record import MAX_PROPERTIES_SIZE

_MSG_ID = re.compile(r"^[0-9A-F]{32}$")
RouteKind = Literal["immediate", "level", "timer"]


class Route(NamedTuple):
    """Where a validated message goes. ``message`` is what gets stored (for a level message,
    the SCHEDULE_TOPIC_XXXX form); ``due_ms`` is when it becomes readable on its real topic.
    (A NamedTuple: one is built per message sent, and a tuple is the cheapest.)"""

    kind: RouteKind
    message: Message
    due_ms: int
    level: int = 0


def _keys_valid(keys: tuple) -> bool:
    """Every key passes :func:`validate_key` (the send paths' cheap test; the reference
    raises the error)."""
    for key in keys:
        if (type(key) is not str or not key or KEY_REFUSED.search(key)
                or (len(key) * 4 > MAX_KEY_BYTES and len(key.encode("utf-8")) > MAX_KEY_BYTES)):
            return False
    return True


def _first_bad_keys(messages: Sequence[Message]) -> int:
    """The index of the first message whose keys :func:`validate_key` refuses (len if none)."""
    for at, msg in enumerate(messages):
        keys = getattr(msg, "keys", None)
        if keys and not _keys_valid(keys):
            return at
    return len(messages)


def _validate(msg: Message, config: BrokerConfig) -> None:
    if not isinstance(msg, Message):
        raise InvalidMessageError(f"send takes a rocks_timer.Message, got {type(msg).__name__}")
    validate_topic(msg.topic)
    for key in msg.keys:
        validate_key(key)
    if len(msg.body) > config.max_message_size:
        raise InvalidMessageError(f"body of {len(msg.body)} bytes exceeds max_message_size "
                                  f"{config.max_message_size}")
    owned = sorted(BROKER_OWNED_PROPERTIES & set(msg.properties))
    if owned:
        raise InvalidMessageError(f"properties {', '.join(owned)} are set by the broker; a "
                                  "producer may not set them")
    for name, value in msg.properties.items():
        if not name or any(c in name + value for c in (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)):
            raise InvalidMessageError(f"property {name!r}={value!r} is empty or contains a "
                                      "separator character (\\x01 or \\x02)")
    if msg.msg_id is not None and not _MSG_ID.match(msg.msg_id):
        raise InvalidMessageError(f"msg_id {msg.msg_id!r} is not 32 hexadecimal characters")
    if msg.queue_id is not None and not (isinstance(msg.queue_id, int) and
                                         0 <= msg.queue_id < 1024):
        raise InvalidMessageError(f"queue_id {msg.queue_id!r} is outside 0..1023")
    if not 0 <= msg.flag < 1 << 31:
        raise InvalidMessageError(f"flag {msg.flag!r} is outside 0..2147483647")


def _integer(name: str, value: object) -> int:
    if isinstance(value, bool):
        raise InvalidMessageError(f"{name}={value!r} is not an integer")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not re.fullmatch(r"[+-]?\d{1,19}", text):
        raise InvalidMessageError(f"{name}={value!r} is not an integer")
    return int(text)


def scheduling_properties(delay_level: int | None = None, delay_ms: int | None = None,
                          deliver_at_ms: int | None = None,
                          deliver_at: dt.datetime | None = None) -> dict[str, str]:
    """The RocketMQ properties the keyword arguments stand for; two at once is an error."""
    given = {k: v for k, v in (("delay_level", delay_level), ("delay_ms", delay_ms),
                               ("deliver_at_ms", deliver_at_ms), ("deliver_at", deliver_at))
             if v is not None}
    if len(given) > 1:
        raise InvalidMessageError(f"give at most one of delay_level, delay_ms, deliver_at_ms, "
                                  f"deliver_at; got {', '.join(given)}")
    if delay_level is not None:
        return {DELAY: str(_integer("delay_level", delay_level))}
    if delay_ms is not None:
        return {TIMER_DELAY_MS: str(_integer("delay_ms", delay_ms))}
    if deliver_at_ms is not None:
        return {TIMER_DELIVER_MS: str(_integer("deliver_at_ms", deliver_at_ms))}
    if deliver_at is not None:
        if not isinstance(deliver_at, dt.datetime) or deliver_at.tzinfo is None:
            raise InvalidMessageError(f"deliver_at={deliver_at!r} must be a timezone-aware datetime")
        return {TIMER_DELIVER_MS: str(int(deliver_at.timestamp() * 1000))}
    return {}


def route(msg: Message, *, now_ms: int, config: BrokerConfig, delay_level: int | None = None,
          delay_ms: int | None = None, deliver_at_ms: int | None = None,
          deliver_at: dt.datetime | None = None,
          new_id: Callable[[], str] | None = None) -> Route:
    """Validate ``msg`` and decide where it goes. Raises from the error tree; stores nothing.

    The common sends (a plain message, at once or with ``delay_ms``/``deliver_at_ms``) take
    :func:`_route_common`; anything it does not vouch for, errors included, goes through
    :func:`route_reference`, so both give the same routes and the same errors. ``new_id``
    gives the id of a message that has none (a batch passes ids made in bulk)."""
    if (delay_level is None and deliver_at is None and (delay_ms is None or deliver_at_ms is None)
            and (not getattr(msg, "keys", None) or _keys_valid(msg.keys))):
        new_id = new_id or new_msg_id
        if _native_route is not None:
            routed = _native_route(msg, now_ms, delay_ms, deliver_at_ms, config.max_message_size,
                                   config.max_delay_ms, MAX_PROPERTIES_SIZE, _valid_topics,
                                   _FORBIDDEN, Message, new_id)
            if routed is not None:
                return _new_route(Route, routed + (0,))
        fast = _route_common(msg, now_ms, config, delay_ms, deliver_at_ms, new_id)
        if fast is not None:
            return fast
    return route_reference(msg, now_ms=now_ms, config=config, delay_level=delay_level,
                           delay_ms=delay_ms, deliver_at_ms=deliver_at_ms, deliver_at=deliver_at)


def route_batch(messages: Sequence[Message], *, now_ms: int, config: BrokerConfig,
                new_id: Callable[[], str] | None = None, **schedule: Any) -> list[Route]:
    """:func:`route` for every message of a batch (the same routes, the same errors), with
    what stays the same from one message to the next looked up once."""
    delay_ms, deliver_at_ms = schedule.get("delay_ms"), schedule.get("deliver_at_ms")
    if (_native_route is None or not set(schedule) <= {"delay_ms", "deliver_at_ms"}
            or (delay_ms is not None and deliver_at_ms is not None)):
        return [route(m, now_ms=now_ms, config=config, new_id=new_id, **schedule)
                for m in messages]
    if type(messages) is not list:
        messages = list(messages)
    # the native loop does not check keys: it routes the messages before the first bad key
    # (one of them may raise first, as in order), then that message raises below
    bad = _first_bad_keys(messages)
    refused = messages[bad] if bad < len(messages) else None
    if refused is not None:
        messages = messages[:bad]
    fixed = (now_ms, delay_ms, deliver_at_ms, config.max_message_size, config.max_delay_ms,
             MAX_PROPERTIES_SIZE, _valid_topics, _FORBIDDEN, Message, new_id or new_msg_id, Route)
    routes: list[Route] = []
    at, n = 0, len(messages)
    while at < n:  # the native loop stops at a message it leaves to Python: routed here, in order
        done = _native_batch(messages, at, *fixed)
        routes += done
        at += len(done)
        if at < n:
            routes.append(route(messages[at], now_ms=now_ms, config=config, new_id=new_id,
                                **schedule))
            at += 1
    if refused is not None:
        route(refused, now_ms=now_ms, config=config, new_id=new_id, **schedule)  # raises
    return routes


try:  # the same in C (rocks_timer/_native/routing.c), when it was built
    from rocks_timer._native.codec import route_common as _native_route
    from rocks_timer._native.codec import route_common_batch as _native_batch
except ImportError:  # pragma: no cover - no C compiler at install time
    _native_route = _native_batch = None

_new_route = tuple.__new__  # Route from a (kind, message, due_ms, level) tuple, no checks
_valid_topics: set[str] = set()  # topics validate_topic accepted (a cache, bounded below)
_VALID_TOPICS_MAX = 4096
_SCHEDULE_NAMES = frozenset(TIMER_PROPERTIES) | {DELAY}
_FORBIDDEN = _SCHEDULE_NAMES | BROKER_OWNED_PROPERTIES  # names the common send never carries


def _route_common(msg: Message, now_ms: int, config: BrokerConfig, delay_ms: int | None,
                  deliver_at_ms: int | None, new_id: Callable[[], str] = new_msg_id
                  ) -> Route | None:
    """``route_reference`` for a message without schedule properties, scheduled by at most one
    integer keyword, when every check passes; None to let the reference decide (and raise).

    The checks are the reference's, done in bulk: a property name or value holding a
    separator, or an empty one, shows in the encoded property string (one ``\x01`` and one
    ``\x02`` per entry, no ``\x01`` at an entry's start, none right before a ``\x02``)."""
    if type(msg) is not Message:
        return None
    topic = msg.topic
    if topic not in _valid_topics:
        try:
            validate_topic(topic)
        except InvalidMessageError:
            return None
        if len(_valid_topics) >= _VALID_TOPICS_MAX:
            _valid_topics.clear()
        _valid_topics.add(topic)
    props = msg.properties
    if (len(msg.body) > config.max_message_size or not BROKER_OWNED_PROPERTIES.isdisjoint(props)
            or not _SCHEDULE_NAMES.isdisjoint(props)):
        return None
    encoded = msg.encoded_properties
    entries = len(props)
    if (encoded.count(b"\x01") != entries or encoded.count(b"\x02") != entries
            or encoded[:1] == b"\x01" or b"\x02\x01" in encoded or b"\x01\x02" in encoded):
        return None
    msg_id = msg.msg_id
    if msg_id is not None and not _MSG_ID.match(msg_id):
        return None
    queue_id = msg.queue_id
    if queue_id is not None and not (type(queue_id) is int and 0 <= queue_id < 1024):
        return None
    if not 0 <= msg.flag < 1 << 31:
        return None
    if delay_ms is not None:
        if type(delay_ms) is not int:
            return None
        name, value, due_ms = TIMER_DELAY_MS, str(delay_ms), now_ms + delay_ms
    elif deliver_at_ms is not None:
        if type(deliver_at_ms) is not int:
            return None
        name, value, due_ms = TIMER_DELIVER_MS, str(deliver_at_ms), deliver_at_ms
    else:
        name = value = None
        due_ms = now_ms
    new_props = dict(props)
    appended = b""
    if name is not None:
        new_props[name] = value
        appended = f"{name}\x01{value}\x02".encode()
    if msg_id is None:
        msg_id = new_props[UNIQ_KEY] = new_id()
        appended += f"{UNIQ_KEY}\x01{msg_id}\x02".encode()
    born_ms = now_ms if msg.born_ms is None else msg.born_ms
    if due_ms <= now_ms:
        kind = "immediate"
        due_ms = now_ms
    else:
        if due_ms - now_ms > config.max_delay_ms:
            return None
        kind = "timer"
        if name != TIMER_DELIVER_MS:
            text = str(due_ms)
            new_props[TIMER_DELIVER_MS] = text
            appended += f"{TIMER_DELIVER_MS}\x01{text}\x02".encode()
    if len(encoded) + len(appended) > MAX_PROPERTIES_SIZE:
        return None
    return Route(kind, msg.extended(new_props, appended, msg_id, born_ms), due_ms)


def route_reference(msg: Message, *, now_ms: int, config: BrokerConfig,
                    delay_level: int | None = None, delay_ms: int | None = None,
                    deliver_at_ms: int | None = None,
                    deliver_at: dt.datetime | None = None) -> Route:
    """The routing rules written out plainly (ARCHITECTURE §3): the reference of :func:`route`."""
    _validate(msg, config)
    props = dict(msg.properties)
    extra = scheduling_properties(delay_level, delay_ms, deliver_at_ms, deliver_at)
    if extra:
        present = sorted((set(TIMER_PROPERTIES) | {DELAY}) & set(props))
        if present:
            raise InvalidMessageError(f"the message already carries {', '.join(present)}; give "
                                      "the schedule either as properties or as an argument")
        props.update(extra)
    if UNIQ_KEY not in props:
        props[UNIQ_KEY] = new_msg_id()
    born_ms = now_ms if msg.born_ms is None else msg.born_ms

    level = _integer(DELAY, props[DELAY]) if DELAY in props else 0
    if level > 0:
        levels = config.delay_levels
        level = levels.clamp(level)
        for name in TIMER_PROPERTIES:
            props.pop(name, None)
        props.update({DELAY: str(level), REAL_TOPIC: msg.topic, REAL_QID: str(msg.queue_id or 0)})
        parked = msg.copy(topic=SCHEDULE_TOPIC, queue_id=levels.queue_id(level), properties=props,
                          born_ms=born_ms)
        _check_properties_size(parked)
        return Route("level", parked, now_ms + levels.delay_ms(level), level)

    due_ms = None
    for name, base in ((TIMER_DELAY_SEC, 1000), (TIMER_DELAY_MS, 1), (TIMER_DELIVER_MS, 0)):
        if name in props:
            value = _integer(name, props[name])
            candidate = now_ms + value * base if base else value
            due_ms = candidate if due_ms is None else due_ms
    if due_ms is None or due_ms <= now_ms:
        final = msg.copy(properties=props, born_ms=born_ms)
        _check_properties_size(final)
        return Route("immediate", final, now_ms)
    if due_ms - now_ms > config.max_delay_ms:
        raise DelayOutOfRangeError(
            f"due time {due_ms} is {due_ms - now_ms} ms ahead; the maximum is "
            f"{config.max_delay_ms} ms (timer_max_delay_sec={config.timer_max_delay_sec})")
    props.setdefault(TIMER_DELIVER_MS, str(due_ms))
    final = msg.copy(properties=props, born_ms=born_ms)
    _check_properties_size(final)
    return Route("timer", final, due_ms)


def _check_properties_size(msg: Message) -> None:
    size = len(msg.encoded_properties)
    if size > MAX_PROPERTIES_SIZE:
        raise InvalidMessageError(f"properties of {size} bytes exceed the limit of "
                                  f"{MAX_PROPERTIES_SIZE} bytes")
