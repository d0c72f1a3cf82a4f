"""Cancel by business key and reschedule, for ``RocksTimerStore``: each is one WriteBatch (a
cancel by key of very many messages: one per 4,096) that changes the timer keys, the key
index, the due counters, the pending counter and, in ``vlog``, the liveness rows together.

A reschedule deletes the old key and writes the message under its new key (due time raised to
the claim floor, as a send's is) in the same batch, so after any crash exactly one of the two
exists: the message is delivered once, either at the old time (the call never returned) or at
the new one. In ``vlog`` the body is written again under the new key (a segment record carries
its key, and reads check it), and the old record stops counting as live.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from rocks_timer.message import TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS
from rocks_timer.timer import keys as K
from rocks_timer.timer.handles import encode_handle
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.claims import Claims
from rocks_timer.timer.rocksdb.database import Database
from rocks_timer.timer.rocksdb.keyindex import KeyIndex, message_keys
from rocks_timer.timer.rocksdb.transaction import Writer
from rocks_timer.timer.rocksdb.vlog import ValueLog
from rocks_timer.timer.store import KeyCancel, Rescheduled
from rocks_timer.timer.values import encode_value

if TYPE_CHECKING:
    from rocks_timer.message import Message

CHUNK = 4_096


def _handle(raw: bytes) -> str:
    key = K.decode_key(raw)
    return encode_handle(key.topic, key.due_ms, key.msg_id)


def handle_of(raw: bytes) -> str:
    key = K.decode_key(raw)
    return encode_handle(key.topic, key.due_ms, key.msg_id)


def rescheduled_copy(message: "Message", due_ms: int) -> "Message":
    """The message as it is parked again: ``TIMER_DELIVER_MS`` says the new due time; the
    relative delays that named the old one are dropped."""
    return message.with_properties({TIMER_DELIVER_MS: str(due_ms)},
                                   remove=(TIMER_DELAY_SEC, TIMER_DELAY_MS))


class Rescheduler:
    """Cancel by key and reschedule: receives the database (reads), the claim state (in-flight
    keys are refused; the due floor), the key index (targets and KEYS), the writer (one
    transaction per call, per 4,096 keys for a cancel by key) and the value log (``vlog``: the
    body is written again under its new key). The caller holds the store's lock (and the
    append fence for a reschedule: it appends value bytes)."""

    def __init__(self, db: Database, claims: Claims, keys: KeyIndex, writer: Writer,
                 vlog: ValueLog | None, compress_threshold: int) -> None:
        self._db, self._claims, self._keys, self._writer = db, claims, keys, writer
        self._vlog, self._threshold = vlog, compress_threshold

    def cancel_by_key(self, topic: str, key: str) -> KeyCancel:
        handles: list[str] = []
        targets = [(raw, value) for raw, value in self._keys.targets(topic, key)
                   if raw not in self._claims]
        for start in range(0, len(targets), CHUNK):
            chunk = targets[start:start + CHUNK]
            txn = self._writer.begin()
            txn.remove_stored(chunk)
            txn.commit()
            handles.extend(handle_of(raw) for raw, _ in chunk)
        return KeyCancel(handles)

    def targets_by_key(self, topic: str, key: str) -> list[tuple[str, bytes]]:
        return [(handle_of(raw), raw) for raw, _ in self._keys.targets(topic, key)]

    def reschedule(self, targets: Sequence[tuple[str, bytes]], due_ms: int,
                   now_ms: int) -> list[Rescheduled]:
        """``targets``: (handle asked about, raw timer key); one transaction."""
        claims, timer, keys = self._claims, self._db.timer, self._keys
        new_due = max(due_ms, claims.low_watermark_ms())
        results: list[Rescheduled] = []
        moved: dict[bytes, bytes] = {}  # old raw -> its index value
        finals: dict[bytes, "Message"] = {}  # new raw -> the message parked there (last wins)
        txn = self._writer.begin()
        changes = txn.index
        for asked, raw in targets:
            parsed = K.decode_key(raw)
            if raw in claims:
                results.append(Rescheduled("in_flight", parsed.topic, parsed.msg_id, asked,
                                           None, None))
                continue
            value = None if raw in moved else timer.get(raw)
            if value is None:
                results.append(Rescheduled("not_found", parsed.topic, parsed.msg_id, asked,
                                           None, None))
                continue
            new_raw = K.encode_key_parts(new_due, parsed.topic, parsed.msg_id)
            handle = encode_handle(parsed.topic, new_due, parsed.msg_id)
            if new_raw != raw:
                message = keys.stored_message(raw, value)  # a damaged one raises
                moved[raw] = value
                changes.removed(raw, message_keys(message))
                finals[new_raw] = rescheduled_copy(message, due_ms)
            results.append(Rescheduled("rescheduled", parsed.topic, parsed.msg_id, asked,
                                       handle, new_due))
        if not moved:
            return results
        new_raws = list(finals)
        existing = timer.get(new_raws)  # the same id already pending at the new time
        for raw in moved:  # deletes before puts
            txn.delete(raw)
        values = [encode_value(finals[raw], self._threshold) for raw in new_raws]
        replaced = [old for old in existing if old is not None]
        live = txn.live
        if self._vlog is not None:
            fields = [(m.queue_id, len(m.body), m.tags) for m in finals.values()]
            values = self._vlog.append(new_raws, values, now_ms, txn.batch, live, fields)
            for value in list(moved.values()) + replaced:
                if I.is_pointer(value) and len(value) >= I.SIZE:
                    live.drop(value)
            for value in values:
                if I.is_pointer(value):
                    live.keep(value)
        for raw, value, old in zip(new_raws, values, existing):
            if old is not None:
                changes.removed(raw, keys.stored_keys(raw, old))
            txn.put(raw, value)
            changes.added(raw, message_keys(finals[raw]))
        txn.pending += len(finals) - len(moved) - len(replaced)
        txn.removed += len(moved)
        txn.commit()
        return results
