"""The message model, RocketMQ property names, the property string codec and message ids.

Properties travel as RocketMQ's string form ``name\\x01value\\x02`` per entry. ``TAGS``, ``KEYS``
and ``UNIQ_KEY`` live in the property map like in RocketMQ; ``Message.tags``, ``.keys`` and
``.msg_id`` are the same values as attributes.
"""
from __future__ import annotations

import calendar
import os
import random
import threading
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Iterable, Mapping

from rocks_timer.errors import InvalidMessageError

# --- property names (RocketMQ's) -------------------------------------------------------------
TAGS = "TAGS"
KEYS = "KEYS"
UNIQ_KEY = "UNIQ_KEY"
DELAY = "DELAY"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"

TIMER_PROPERTIES = (TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS)
BROKER_OWNED_PROPERTIES = frozenset(
    {REAL_TOPIC, REAL_QID, TIMER_OUT_MS, TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS, TIMER_ROLL_TIMES,
     TIMER_DEL_UNIQKEY}
)

# --- topics ------------------------------------------------------------------------------------
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
WHEEL_TIMER_TOPIC = "rmq_sys_wheel_timer"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"


def is_system_topic(topic: str) -> bool:
    return topic == SCHEDULE_TOPIC or topic.startswith(SYSTEM_TOPIC_PREFIX)


# --- property string codec -----------------------------------------------------------------------
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


def encode_properties_py(properties: Mapping[str, str]) -> bytes:
    """``name\\x01value\\x02`` per entry (the last one included), UTF-8."""
    parts = []
    for name, value in properties.items():
        parts.append(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}")
    return "".join(parts).encode("utf-8")


try:  # the same encoding in C (rocks_timer/_native/fields.c), when it was built
    from rocks_timer._native.codec import encode_properties as _encode_properties_c
except ImportError:  # pragma: no cover - no C compiler at install time
    _encode_properties_c = None


def encode_properties(properties: Mapping[str, str]) -> bytes:
    """``name\\x01value\\x02`` per entry (the last one included), UTF-8."""
    if _encode_properties_c is not None:
        try:
            return _encode_properties_c(properties)
        except TypeError:  # a name or value that is not a str: the Python version formats it
            pass
    return encode_properties_py(properties)


def decode_properties(data: bytes | str) -> dict[str, str]:
    """Inverse of :func:`encode_properties`; entries with an empty name or value are skipped."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
    result: dict[str, str] = {}
    for entry in text.split(PROPERTY_SEPARATOR):
        name, sep, value = entry.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            result[name] = value
    return result


# --- message ids -------------------------------------------------------------------------------
class MessageIdGenerator:
    """RocketMQ-style client message ids (``UNIQ_KEY``): 32 upper-case hex characters.

    Layout (16 bytes): host prefix (4) + pid (2) + random per-generator salt (4)
    + ms since the start of the month (4) + counter (2). Unique per sender.
    """

    def __init__(self) -> None:
        prefix = random.SystemRandom().getrandbits(32).to_bytes(4, "big")
        salt = random.SystemRandom().getrandbits(32).to_bytes(4, "big")
        self._prefix = prefix + (os.getpid() & 0xFFFF).to_bytes(2, "big") + salt
        self._prefix_hex = self._prefix.hex().upper()
        self._lock = threading.Lock()
        self._counter = 0
        self._last_ms = -1
        self._month_start = self._month_end = 0.0

    def next_id(self) -> str:
        return self.next_ids(1)[0]

    def next_ids(self, count: int) -> list[str]:
        """``count`` new ids under one lock: the same ids ``count`` calls of ``next_id`` could
        give (one clock reading for all; the counter moves to the next ms when it wraps)."""
        with self._lock:
            now = time.time()
            if not self._month_start <= now < self._month_end:
                lt = time.gmtime(now)
                self._month_start = calendar.timegm((lt.tm_year, lt.tm_mon, 1, 0, 0, 0))
                year, month = (lt.tm_year, lt.tm_mon + 1) if lt.tm_mon < 12 else (lt.tm_year + 1, 1)
                self._month_end = calendar.timegm((year, month, 1, 0, 0, 0))
            ms = max(int((now - self._month_start) * 1000) & 0xFFFFFFFF, self._last_ms)
            counter, out = self._counter, []
            head = f"{self._prefix_hex}{ms:08X}"
            for _ in range(count):
                counter = (counter + 1) & 0xFFFF
                if counter == 0:  # wrapped within one ms: move to the next ms
                    ms = (ms + 1) & 0xFFFFFFFF
                    head = f"{self._prefix_hex}{ms:08X}"
                out.append(head + format(counter, "04X"))
            self._counter, self._last_ms = counter, ms
        return out


_ids = MessageIdGenerator()


def new_msg_id() -> str:
    return _ids.next_id()


def msg_id_supplier(count: int) -> Callable[[], str]:
    """A ``new_msg_id`` for a batch: ``count`` ids made at once, then one at a time."""
    made = iter(_ids.next_ids(count))
    return lambda: next(made, None) or _ids.next_id()


def msg_id_bytes(msg_id: str) -> bytes:
    """The 16 raw bytes of a 32-hex message id."""
    try:
        raw = bytes.fromhex(msg_id)
    except (ValueError, TypeError):
        raw = b""
    if len(raw) != 16:
        raise InvalidMessageError(f"message id {msg_id!r} is not 32 hexadecimal characters")
    return raw


# --- the message -----------------------------------------------------------------------------
def _normalise_keys(keys: str | Iterable[str] | None) -> tuple[str, ...]:
    if keys is None:
        return ()
    if isinstance(keys, str):
        return tuple(k for k in keys.split(" ") if k)
    return tuple(keys)


@dataclass(frozen=True)
class Message:
    """A RocketMQ message. ``properties`` is the whole property map (TAGS, KEYS, UNIQ_KEY included).

    Stored fields (``queue_id`` ... ``store_ms``) are set by the broker; ``queue_id`` given on send
    picks the destination queue (default 0).
    """

    topic: str
    body: bytes = b""
    tags: str | None = None
    keys: tuple[str, ...] = ()
    flag: int = 0
    properties: Mapping[str, str] = field(default_factory=dict)
    msg_id: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    commitlog_offset: int | None = None
    born_ms: int | None = None
    store_ms: int | None = None
    reconsume_times: int = 0

    def __post_init__(self) -> None:
        props = dict(self.properties)
        for name, value in props.items():
            if type(name) is not str or type(value) is not str:
                if not (isinstance(name, str) and isinstance(value, str)):
                    raise InvalidMessageError(
                        f"property {name!r}={value!r}: names and values must be strings")
        body = self.body
        if type(body) is not bytes:
            if isinstance(body, (bytearray, memoryview)):
                object.__setattr__(self, "body", bytes(body))
            elif isinstance(body, str):
                object.__setattr__(self, "body", body.encode("utf-8"))
            else:
                raise InvalidMessageError(f"body must be bytes, got {type(body).__name__}")
        tags = self.tags if self.tags is not None else props.get(TAGS)
        keys = _normalise_keys(self.keys) if self.keys else _normalise_keys(props.get(KEYS))
        msg_id = self.msg_id if self.msg_id is not None else props.get(UNIQ_KEY)
        if tags:
            props[TAGS] = tags
        if keys:
            props[KEYS] = " ".join(keys)
        if msg_id:
            msg_id = msg_id.upper()
            props[UNIQ_KEY] = msg_id
        object.__setattr__(self, "tags", tags or None)
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "msg_id", msg_id or None)
        object.__setattr__(self, "properties", MappingProxyType(props))

    def copy(self, **changes) -> "Message":
        """A copy with ``changes`` (a faster ``dataclasses.replace``)."""
        fields = {"topic": self.topic, "body": self.body, "flag": self.flag,
                  "properties": self.properties, "queue_id": self.queue_id,
                  "queue_offset": self.queue_offset, "commitlog_offset": self.commitlog_offset,
                  "born_ms": self.born_ms, "store_ms": self.store_ms,
                  "reconsume_times": self.reconsume_times}
        fields.update(changes)
        return Message(**fields)

    @classmethod
    def from_wire(cls, topic: str, body: bytes, properties: dict[str, str], *, flag: int = 0,
                  queue_id: int | None = None, born_ms: int | None = None,
                  reconsume_times: int = 0) -> "Message":
        """The message the constructor makes of these parts, made without its generic checks
        when their types make them moot: a front's decoded send (``properties`` a new dict of
        str, taken over, not copied; ``body`` bytes). Anything else takes the constructor.
        About a third of its time; tests/broker/test_message_from_wire.py holds the two equal."""
        if type(body) is not bytes or not all(
                [type(k) is str and type(v) is str for k, v in properties.items()]):
            return cls(topic=topic, body=body, flag=flag, properties=properties,
                       queue_id=queue_id, born_ms=born_ms, reconsume_times=reconsume_times)
        tags, msg_id = properties.get(TAGS), properties.get(UNIQ_KEY)
        keys = _normalise_keys(properties.get(KEYS))
        if keys:
            properties[KEYS] = " ".join(keys)
        if msg_id:
            msg_id = properties[UNIQ_KEY] = msg_id.upper()
        new = object.__new__(cls)
        new.__dict__.update(
            topic=topic, body=body, tags=tags or None, keys=keys, flag=flag,
            properties=MappingProxyType(properties), msg_id=msg_id or None, queue_id=queue_id,
            queue_offset=None, commitlog_offset=None, born_ms=born_ms, store_ms=None,
            reconsume_times=reconsume_times)
        return new

    def extended(self, properties: dict[str, str], appended: bytes, msg_id: str,
                  born_ms: int | None) -> "Message":
        """This message with ``properties``: its own entries, in order, followed by new ones
        whose names are not TAGS, KEYS or UNIQ_KEY unless ``msg_id`` is the new UNIQ_KEY, and
        whose encoded form is ``appended``. The routing fast path's copy: nothing to
        re-validate or re-encode (tests/broker/test_routing_fast.py holds it equal to ``copy``)."""
        new = object.__new__(Message)
        fields = new.__dict__
        fields.update(self.__dict__)
        fields["properties"] = MappingProxyType(properties)
        fields["msg_id"] = msg_id
        fields["born_ms"] = born_ms
        fields["_encoded_properties"] = self.encoded_properties + appended
        return new

    def with_properties(self, set_: Mapping[str, str] | None = None,
                        remove: Iterable[str] = ()) -> "Message":
        props = dict(self.properties)
        for name in remove:
            props.pop(name, None)
        props.update(set_ or {})
        return self.copy(properties=props)

    def get_property(self, name: str, default: str | None = None) -> str | None:
        return self.properties.get(name, default)

    @property
    def encoded_properties(self) -> bytes:
        """The RocketMQ property string, computed once (the message is immutable; a plain
        ``__dict__`` cache, because 3.11's ``cached_property`` takes a lock per access)."""
        cached = self.__dict__.get("_encoded_properties")
        if cached is None:
            cached = self.__dict__["_encoded_properties"] = encode_properties(self.properties)
        return cached

    @property
    def payload_size(self) -> int:
        """body + properties + topic bytes: the payload unit of write amplification
        before issue 29 (docs/WRITE_AMPLIFICATION.md, definitions)."""
        return len(self.body) + len(self.encoded_properties) + len(self.topic.encode("utf-8"))
