"""The copy the deliverer puts into the CommitLog for a due timer message.

A delivered copy is the stored message with ``TIMER_OUT_MS`` (its key's due time) and
``TIMER_DEQUEUE_MS`` (when it was claimed) added. :func:`delivery_copy_py` builds it the plain
way, as a ``Message``; engines that keep encoded values (:mod:`rocks_timer.timer.values`) use
:func:`delivery_copies`, which turns a whole claimed batch into :class:`DeliveryCopy` objects in
one native call (``rocks_timer/_native/delivery.c``) without decoding a ``Message`` per record,
and falls back to the reference for any value the native path does not vouch for.
tests/test_delivery_copies.py holds both to the same CommitLog bytes.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from rocks_timer.message import (TIMER_DEQUEUE_MS, TIMER_OUT_MS, Message, decode_properties)
from rocks_timer.timer.values import decode_value

try:
    from rocks_timer._native.codec import delivery_copies as _native_copies
except ImportError:  # pragma: no cover - no C compiler at install time
    _native_copies = None


class DeliveryCopy:
    """What the CommitLog writer reads of a message, and no more: ``topic``, ``body``,
    ``queue_id``, ``flag``, ``born_ms``, ``reconsume_times``, ``tags``, ``msg_id`` and the
    encoded property string, all in the instance ``__dict__`` (set by the native code)."""

    @property
    def encoded_properties(self) -> bytes:
        return self.__dict__["_encoded_properties"]

    @property
    def properties(self) -> Mapping[str, str]:
        return MappingProxyType(decode_properties(self.encoded_properties))

    def to_message(self) -> Message:
        d = self.__dict__
        return Message(d["topic"], d["body"], flag=d["flag"], properties=self.properties,
                       queue_id=d["queue_id"], born_ms=d["born_ms"],
                       reconsume_times=d["reconsume_times"])

    def __repr__(self) -> str:
        return f"DeliveryCopy(topic={self.topic!r}, msg_id={self.msg_id!r})"


def delivery_copy_py(message: Message, due_ms: int, now_ms: int) -> Message:
    """The reference: ``message`` with TIMER_OUT_MS and, unless it has one, TIMER_DEQUEUE_MS."""
    props = {TIMER_OUT_MS: str(due_ms)}
    if TIMER_DEQUEUE_MS not in message.properties:
        props[TIMER_DEQUEUE_MS] = str(now_ms)
    return message.with_properties(props)


def delivery_copies(keys: list[bytes], values: list[bytes], dues: list[int], now_ms: int
                    ) -> list[DeliveryCopy | Message]:
    """The copies of encoded timer values (``keys`` name them in errors). A corrupt value
    raises ``CorruptRecordError`` from :func:`decode_value`; use :func:`native_copies` to see
    which ones the native path left to the reference."""
    copies = native_copies(values, dues, now_ms)
    for i, copy in enumerate(copies):
        if copy is None:
            copies[i] = delivery_copy_py(decode_value(keys[i], values[i]), dues[i], now_ms)
    return copies


def native_copies(values: list[bytes], dues: list[int], now_ms: int
                  ) -> list[DeliveryCopy | None]:
    """The native path alone: a copy, or None where the reference must decide."""
    if _native_copies is None:  # pragma: no cover - no C compiler at install time
        return [None] * len(values)
    return _native_copies(values, dues, now_ms, DeliveryCopy)
