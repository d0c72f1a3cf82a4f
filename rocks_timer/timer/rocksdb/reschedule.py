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

from rocksdict import WriteBatch

from rocks_timer.message import TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS
from rocks_timer.errors import InvalidHandleError, InvalidMessageError
from rocks_timer.timer import keys as K
from rocks_timer.timer.handles import decode_handle, encode_handle
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb import keyindex
from rocks_timer.timer.rocksdb import meta as rocks_meta
from rocks_timer.timer.rocksdb.keyindex import IndexChanges
from rocks_timer.timer.store import KeyCancel, Rescheduled, ScanPage, TimerKey
from rocks_timer.timer.values import encode_value

if TYPE_CHECKING:
    from rocks_timer.message import Message
    from rocks_timer.timer.rocksdb.store import RocksTimerStore

CHUNK = 4_096


def _handle(raw: bytes) -> str:
    key = K.decode_key(raw)
    return encode_handle(key.topic, key.due_ms, key.msg_id)


def cancel_by_key(store: "RocksTimerStore", topic: str, key: str) -> KeyCancel:
    K.key_index_prefix(topic, key)  # InvalidMessageError before anything else
    handles: list[str] = []
    with store._lock:
        store._check_open()
        targets = [(raw, value) for raw, value in keyindex.keyed_targets(store, topic, key)
                   if raw not in store._in_flight]
        for start in range(0, len(targets), CHUNK):
            chunk = targets[start:start + CHUNK]
            store._remove_stored(chunk)
            handles.extend(_handle(raw) for raw, _ in chunk)
    return KeyCancel(handles)


def rescheduled_copy(message: "Message", due_ms: int) -> "Message":
    """The message as it is parked again: ``TIMER_DELIVER_MS`` says the new due time; the
    relative delays that named the old one are dropped."""
    return message.with_properties({TIMER_DELIVER_MS: str(due_ms)},
                                   remove=(TIMER_DELAY_SEC, TIMER_DELAY_MS))


def reschedule(store: "RocksTimerStore", targets: Sequence[tuple[str, bytes]], due_ms: int,
               now_ms: int) -> list[Rescheduled]:
    """``targets``: (handle asked about, raw timer key). Lock taken here; one batch."""
    with store._append_fence, store._lock:  # it may append value bytes (store.py)
        store._check_open()
        return _reschedule_locked(store, targets, due_ms, now_ms)


def reschedule_by_key(store: "RocksTimerStore", topic: str, key: str, due_ms: int,
                      now_ms: int) -> list[Rescheduled]:
    K.key_index_prefix(topic, key)
    with store._append_fence, store._lock:
        store._check_open()
        targets = [(_handle(raw), raw) for raw, _ in keyindex.keyed_targets(store, topic, key)]
        return _reschedule_locked(store, targets, due_ms, now_ms)


def _reschedule_locked(store: "RocksTimerStore", targets: Sequence[tuple[str, bytes]],
                       due_ms: int, now_ms: int) -> list[Rescheduled]:
    new_due = max(due_ms, store._low_watermark_ms())
    results: list[Rescheduled] = []
    moved: dict[bytes, bytes] = {}  # old raw -> its index value
    finals: dict[bytes, "Message"] = {}  # new raw -> the message parked there (last wins)
    changes = IndexChanges()
    for asked, raw in targets:
        parsed = K.decode_key(raw)
        if raw in store._in_flight:
            results.append(Rescheduled("in_flight", parsed.topic, parsed.msg_id, asked, None, None))
            continue
        value = None if raw in moved else store._timer.get(raw)
        if value is None:
            results.append(Rescheduled("not_found", parsed.topic, parsed.msg_id, asked, None,
                                       None))
            continue
        new_raw = K.encode_key_parts(new_due, parsed.topic, parsed.msg_id)
        handle = encode_handle(parsed.topic, new_due, parsed.msg_id)
        if new_raw != raw:
            message = keyindex.stored_message(store, raw, value)  # a damaged one raises
            moved[raw] = value
            changes.removed(raw, keyindex.message_keys(message))
            finals[new_raw] = rescheduled_copy(message, due_ms)
        results.append(Rescheduled("rescheduled", parsed.topic, parsed.msg_id, asked, handle,
                                   new_due))
    if not moved:
        return results
    new_raws = list(finals)
    existing = store._timer.get(new_raws)  # the same id already pending at the new time
    batch = WriteBatch(raw_mode=True)
    for raw in moved:  # deletes before puts
        batch.delete(raw, store._timer_h)
    threshold = store.config.timer_compress_threshold
    values = [encode_value(finals[raw], threshold) for raw in new_raws]
    replaced = [old for old in existing if old is not None]
    new_live = None
    if store.vlog is not None:
        from rocks_timer.timer.rocksdb.liveness import Changes
        live = Changes()
        fields = [(m.queue_id, len(m.body), m.tags) for m in finals.values()]
        values = store.vlog.append(new_raws, values, now_ms, batch, live, fields)
        for value in list(moved.values()) + replaced:
            if I.is_pointer(value) and len(value) >= I.SIZE:
                live.drop(value)
        for value in values:
            if I.is_pointer(value):
                live.keep(value)
        new_live = store.vlog.stage(live, batch)
    for raw, value, old in zip(new_raws, values, existing):
        if old is not None:
            changes.removed(raw, keyindex.stored_keys(store, raw, old))
        batch.put(raw, value, store._timer_h)
        changes.added(raw, keyindex.message_keys(finals[raw]))
    pending = store._pending + len(finals) - len(moved) - len(replaced)
    if pending != store._pending:
        batch.put(K.META_PENDING, rocks_meta.pack_u64(pending), store._meta_h)
    new_counts = keyindex.stage(store, changes, batch)
    store._write(batch)
    if new_live:
        store.vlog.commit(new_live)
    keyindex.commit(store, changes, new_counts)
    store._pending = pending
    store._deletes_since_reclaim += len(moved)
    return results


class KeyedRocksOps:
    """The ``TimerStore`` operations by business key, reschedule and due counts of
    ``RocksTimerStore`` (mixed in; they use its lock, families and counters)."""

    def find(self, topic: str, key: str, *, limit: int = 100,
             after: str | None = None) -> ScanPage:
        return keyindex.find(self, topic, key, limit, after)

    def cancel_by_key(self, topic: str, key: str, now_ms: int) -> KeyCancel:
        return cancel_by_key(self, topic, key)

    def reschedule(self, handles: Sequence[str], due_ms: int, now_ms: int) -> list[Rescheduled]:
        targets = []
        for handle in handles:
            parsed = decode_handle(handle)
            try:
                targets.append((handle, K.encode_key(TimerKey(parsed.due_ms, parsed.topic,
                                                               parsed.msg_id))))
            except InvalidMessageError as exc:
                raise InvalidHandleError(f"handle {handle!r} names no possible key: {exc}"
                                         ) from None
        return reschedule(self, targets, due_ms, now_ms)

    def reschedule_by_key(self, topic: str, key: str, due_ms: int, now_ms: int
                          ) -> list[Rescheduled]:
        return reschedule_by_key(self, topic, key, due_ms, now_ms)

    def count_due(self, ranges: Sequence[tuple[int | None, int | None]]) -> list[int]:
        with self._lock:
            self._check_open()
            return self._due.count_many(ranges)
