"""The copy the deliverer puts into the CommitLog for a due timer message.

A delivered copy is the stored message with ``TIMER_OUT_MS`` (its key's due time) and
``TIMER_DEQUEUE_MS`` (when it was claimed) added. :func:`delivery_copy_py` builds it the plain
way, as a ``Message``. Engines that keep encoded values (:mod:`rocks_timer.timer.values`) use
:func:`native_copies`, which turns a whole claimed batch into *prepared records*
(:func:`rocks_timer.record.prepare_record`: the CommitLog record with its place, store time and
CRC left for the writer) in one native call (``rocks_timer/_native/delivery.c``), without a
``Message`` per record; where it returns None the engine uses the reference.
:func:`prepared_copy_py` is the reference of one native result;
tests/engines/test_delivery_copies.py holds the two equal byte for byte.
"""
from __future__ import annotations

from rocks_timer.consumequeue import tags_hash
from rocks_timer.message import SCHEDULE_TOPIC, TIMER_DEQUEUE_MS, TIMER_OUT_MS, Message
from rocks_timer.record import prepare_record

try:
    from rocks_timer._native.codec import delivery_copies as _native_copies
except ImportError:  # pragma: no cover - no C compiler at install time
    _native_copies = None


def delivery_copy_py(message: Message, due_ms: int, now_ms: int) -> Message:
    """The reference: ``message`` with TIMER_OUT_MS and, unless it has one, TIMER_DEQUEUE_MS."""
    props = {TIMER_OUT_MS: str(due_ms)}
    if TIMER_DEQUEUE_MS not in message.properties:
        props[TIMER_DEQUEUE_MS] = str(now_ms)
    return message.with_properties(props)


def prepared_copy_py(message: Message, due_ms: int, now_ms: int) -> bytes:
    """What the native path gives for a value that decodes to ``message`` (when it gives
    anything): the prepared record of :func:`delivery_copy_py`'s copy."""
    copy = delivery_copy_py(message, due_ms, now_ms)
    if copy.topic == SCHEDULE_TOPIC:
        raise ValueError("level messages are never timer values")
    return prepare_record(copy, tags_hash(copy.tags) if copy.tags else 0)


def native_copies(values: list[bytes], dues: list[int], now_ms: int) -> list[bytes | None]:
    """Prepared records of encoded timer values, or None where the reference must decide
    (and, for a damaged value, report it)."""
    if _native_copies is None:  # pragma: no cover - no C compiler at install time
        return [None] * len(values)
    return _native_copies(values, dues, now_ms)
