"""The secondary index by business key and the due counters of ``RocksTimerStore``.

The key index maps (topic, one of the message's KEYS, due, msg id) to nothing; its entries
live in ``meta`` under their own prefix (layout in :mod:`rocks_timer.timer.keys`), beside the due counters
(:mod:`rocks_timer.timer.rocksdb.duecount`). Every operation that adds or removes a timer key
collects what it did in an :class:`IndexChanges` and stages it into **its own WriteBatch**
(:func:`stage`), so the index and the counters are exact after any crash.

Cost for messages without keys: a schedule adds them to the counters only; a removal reads a
message's keys only when the store has ever indexed one (``store._keyed``). A delivery knows
its message already; a cancel, reconcile or reschedule decodes the stored value (in ``vlog``,
reads its segment record) to learn which entries to drop. A quarantined value cannot be
decoded: its entries are left dangling and every reader (``find``) checks the timer key first.
"""
from __future__ import annotations

import logging
from typing import Any, TYPE_CHECKING, Iterable, Iterator

from rocksdict import ReadOptions, WriteBatch

from rocks_timer.errors import (ConfigError, CorruptRecordError, InvalidHandleError,
                                 InvalidMessageError)
from rocks_timer.timer import keys as K
from rocks_timer.timer.handles import decode_handle, encode_handle
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.claim_codec import due_second_counts
from rocks_timer.timer.rocksdb.duecount import expected_counters
from rocks_timer.timer.rocksdb.scan import check_iterator
from rocks_timer.timer.store import PendingEntry, ScanPage, TimerKey
from rocks_timer.timer.values import decode_value

if TYPE_CHECKING:
    from rocks_timer.message import Message
    from rocks_timer.timer.rocksdb.store import RocksTimerStore

log = logging.getLogger(__name__)
CHUNK = 4_096
REBUILD_CHUNK = 10_000


class IndexChanges:
    """What one batch does to the due counters and the key index. ``emptied``: due-time
    intervals ``(lo_ms, hi_ms)`` whose every pending key this batch removes, ends excluded (a
    delivery's claimed spans): the counters of buckets lying wholly inside are cleared by range
    (``DueCounters.stage``)."""

    __slots__ = ("deltas", "puts", "deletes", "emptied")

    def __init__(self) -> None:
        self.deltas: dict[int, int] = {}
        self.puts: list[bytes] = []
        self.deletes: list[bytes] = []
        self.emptied: list[tuple[int, int]] = []

    def added(self, raw: bytes, keys: Iterable[str] = ()) -> None:
        due = K.key_due_ms(raw)
        self.deltas[due] = self.deltas.get(due, 0) + 1
        for key in keys:
            self.puts.append(K.index_entry(raw, key))

    def removed(self, raw: bytes, keys: Iterable[str] = ()) -> None:
        due = K.key_due_ms(raw)
        self.deltas[due] = self.deltas.get(due, 0) - 1
        for key in keys:
            self.deletes.append(K.index_entry(raw, key))


def removed_unkeyed(changes: IndexChanges, raws: Iterable[bytes]) -> None:
    """``changes.removed(raw)`` for many keys without index entries (a delivery batch): the
    keys counted per due second in one native pass (the counters are per second at the finest,
    ``duecount``)."""
    deltas = changes.deltas
    for second, n in due_second_counts(raws).items():
        due = second * 1000
        deltas[due] = deltas.get(due, 0) - n


def message_keys(message: "Message") -> tuple[str, ...]:
    keys = message.keys
    return tuple(dict.fromkeys(keys)) if len(keys) > 1 else keys


def schedule_changes(store: "RocksTimerStore", raw_keys: list[bytes], records: list,
                     olds: dict[bytes, bytes | None], dues: list[int] | None = None
                     ) -> tuple[IndexChanges, int]:
    """What a schedule batch does to the counters and the index, and how many keys it adds.
    A key stored already (a producer's retry) keeps its count; its entries follow its new
    KEYS. The last record of a key repeated in the batch wins, as in the timer column family.
    ``dues`` (each key's due time) lets the common batch, new distinct keys without KEYS, be
    counted without a pass over the records' keys."""
    changes = IndexChanges()
    if (dues is not None and len(olds) == len(raw_keys) and all(old is None for old in olds.values())
            and not any([r.message.keys for r in records])):
        deltas = changes.deltas
        if len(dues) == 1:
            deltas[dues[0]] = 1
        else:
            for due in dues:
                deltas[due] = deltas.get(due, 0) + 1
        return changes, len(raw_keys)
    if len(raw_keys) == 1:
        final = {raw_keys[0]: records[0].message}
    else:
        final = dict(zip(raw_keys, (r.message for r in records)))
    added = 0
    for raw, message in final.items():
        keys = message.keys
        if len(keys) > 1:
            keys = tuple(dict.fromkeys(keys))
        old = olds[raw]
        if old is None:
            added += 1
            changes.added(raw, keys)
            continue
        old_keys = stored_keys(store, raw, old)
        if old_keys != keys:
            changes.deletes.extend(K.index_entry(raw, k) for k in old_keys)
            changes.puts.extend(K.index_entry(raw, k) for k in keys)
    return changes, added


def stage(store: "RocksTimerStore", changes: IndexChanges, batch: WriteBatch) -> dict:
    """Put the index entries and counters of ``changes`` into ``batch`` (deletes before puts:
    a key re-sent with the same KEYS keeps its entries). Returns what :func:`commit` takes."""
    keys_h = store._keys_h
    for entry in changes.deletes:
        batch.delete(entry, keys_h)
    for entry in changes.puts:
        batch.put(entry, b"", keys_h)
    return store._due.stage(changes.deltas, batch, changes.emptied) if changes.deltas else {}


def commit(store: "RocksTimerStore", changes: IndexChanges, new: dict) -> None:
    """After the batch is written: counters cached, and the store knows keys exist."""
    if new:
        store._due.commit(new)
    if changes.puts:
        store._keyed = True


def stored_message(store: "RocksTimerStore", raw: bytes, value: bytes) -> "Message":
    """The message an index value holds (in ``vlog`` read from its segment record)."""
    pointer = I.pointer_or_none(value) if store.vlog is not None else None
    body = store.vlog.read(raw, pointer) if pointer is not None else value
    return decode_value(raw, body)


def stored_keys(store: "RocksTimerStore", raw: bytes, value: bytes | None) -> tuple[str, ...]:
    """The KEYS of a stored message, () when the store never indexed any (no read at all) or
    when the value does not decode (its entries then dangle; readers check the timer key)."""
    if not store._keyed or value is None:
        return ()
    try:
        return message_keys(stored_message(store, raw, value))
    except CorruptRecordError as exc:
        log.warning("timer store %s: keys of %s unreadable, index entries left dangling: %s",
                    store.path, bytes(raw).hex(), exc)
        return ()


# -- reads ------------------------------------------------------------------------------------
def _walk(store: "RocksTimerStore", prefix: bytes, start: bytes) -> Iterator[bytes]:
    """Timer keys named by the index entries of ``prefix`` from ``start`` (lock held)."""
    opts = ReadOptions()
    opts.set_iterate_upper_bound(prefix + b"\xff" * (K.DUE_SIZE + K.MSG_ID_SIZE + 1))
    it = store._keys.iter(opts)
    try:
        it.seek(start)
        while it.valid():
            yield K.timer_key_of_entry(it.key())
            it.next()
        check_iterator(it, f"timer store {store.path} key index")
    finally:
        del it


def _live_chunks(store: "RocksTimerStore", prefix: bytes, start: bytes
                 ) -> Iterator[list[tuple[bytes, bytes]]]:
    """(timer key, index value) of the live entries, in chunks; dangling ones skipped."""
    chunk: list[bytes] = []
    walk = _walk(store, prefix, start)
    while True:
        raw = next(walk, None)
        if raw is not None:
            chunk.append(raw)
            if len(chunk) < CHUNK:
                continue
        if chunk:
            values = store._timer.get(chunk)
            live = [(r, v) for r, v in zip(chunk, values) if v is not None]
            if live:
                yield live
            chunk = []
        if raw is None:
            return


def _start_after(prefix: bytes, topic: str, key: str, after: str | None) -> bytes:
    if after is None:
        return prefix
    parsed = decode_handle(after)
    if parsed.topic != topic:
        raise InvalidHandleError(f"after={after!r} is a handle of topic {parsed.topic!r}, "
                                 f"not {topic!r}")
    try:
        raw = K.encode_key(TimerKey(parsed.due_ms, parsed.topic, parsed.msg_id))
    except InvalidMessageError as exc:
        raise InvalidHandleError(f"after={after!r} names no possible key: {exc}") from None
    return K.key_successor(K.index_entry(raw, key))


def find(store: "RocksTimerStore", topic: str, key: str, limit: int, after: str | None
         ) -> ScanPage:
    prefix = K.key_index_prefix(topic, key)
    start = _start_after(prefix, topic, key, after)
    if limit <= 0:
        return ScanPage([], None)
    entries: list[PendingEntry] = []
    with store._lock:
        store._check_open()
        for live in _live_chunks(store, prefix, start):
            for raw, value in live:
                if len(entries) == limit:
                    return ScanPage(entries, entries[-1].handle)
                parsed = K.decode_key(raw)
                info = I.peek(raw, value)
                entries.append(PendingEntry(
                    parsed.due_ms, parsed.topic, parsed.msg_id,
                    encode_handle(parsed.topic, parsed.due_ms, parsed.msg_id),
                    info.body_size, info.queue_id, info.tags))
    return ScanPage(entries, None)


def keyed_targets(store: "RocksTimerStore", topic: str, key: str) -> list[tuple[bytes, bytes]]:
    """Every live (timer key, index value) of (topic, key), lock held (cancel/reschedule)."""
    prefix = K.key_index_prefix(topic, key)
    return [pair for live in _live_chunks(store, prefix, prefix) for pair in live]


# -- build on open, check -----------------------------------------------------------------------
def ensure_built(store: "RocksTimerStore") -> None:
    """On open: a store made before the key index existed gets it (and its due counters)
    built by one walk of its keys; one at key index version 1 gets its due counters rewritten
    in the compact format (a walk of the keys alone). The marker in ``meta`` is written last,
    so a crash during either starts it again from scratch."""
    version = store._meta.get(K.META_KEY_INDEX)
    if version is None:
        rebuild(store)
        return
    if bytes(version) == b"1":
        rebuild_counters(store)
    elif bytes(version) != K.KEY_INDEX_VERSION:
        raise ConfigError(f"timer store {store.path}: format.key_index is "
                          f"{bytes(version).decode(errors='replace')!r}, written by a newer "
                          f"build (this one reads 1 and {K.KEY_INDEX_VERSION.decode()})")
    opts = ReadOptions()
    opts.set_iterate_upper_bound(K.META_KEY_INDEX_PREFIX + b"\xff")
    it = store._keys.iter(opts)
    try:
        it.seek(K.META_KEY_INDEX_PREFIX)
        store._keyed = it.valid()
        check_iterator(it, f"timer store {store.path} key index")
    finally:
        del it


def _clear_counters(store: "RocksTimerStore", batch: WriteBatch) -> None:
    for prefix in [p for p, _ in K.DUE_COUNTER_WIDTHS] + list(K.LEGACY_DUE_COUNTER_PREFIXES):
        batch.delete_range(prefix, prefix + b"\xff" * 9, store._meta_h)


def _put_counters(store: "RocksTimerStore", dues: list[int], batch: WriteBatch) -> None:
    for name, value in expected_counters(dues).items():
        batch.put(name, K.pack_count(value), store._meta_h)


def rebuild_counters(store: "RocksTimerStore") -> int:
    """Drop the due counters (either format) and write them again from the timer keys alone;
    returns how many keys were counted."""
    with store._lock:
        clear = WriteBatch(raw_mode=True)
        _clear_counters(store, clear)
        store._db.write(clear)
        store._due.forget()
        dues: list[int] = []
        it = store._timer.iter(ReadOptions())
        try:
            it.seek_to_first()
            while it.valid():
                dues.append(K.key_due_ms(it.key()))
                it.next()
            check_iterator(it, f"timer store {store.path} due counters build")
        finally:
            del it
        batch = WriteBatch(raw_mode=True)
        _put_counters(store, dues, batch)
        batch.put(K.META_KEY_INDEX, K.KEY_INDEX_VERSION, store._meta_h)
        store._db.write(batch)
        log.warning("timer store %s: due counters rewritten in the compact format for %d "
                    "pending keys", store.path, len(dues))
        return len(dues)


def rebuild(store: "RocksTimerStore") -> dict[str, int]:
    """Drop and rebuild the key index and the due counters from the timer keys."""
    with store._lock:
        clear = WriteBatch(raw_mode=True)
        clear.delete_range(K.META_KEY_INDEX_PREFIX, K.META_KEY_INDEX_PREFIX + b"\xff",
                           store._keys_h)
        _clear_counters(store, clear)
        store._db.write(clear)
        store._due.forget()
        store._keyed = True  # read every value's keys
        dues: list[int] = []
        entries = unreadable = 0
        batch = WriteBatch(raw_mode=True)
        it = store._timer.iter(ReadOptions())
        try:
            it.seek_to_first()
            while it.valid():
                raw = bytes(it.key())
                dues.append(K.key_due_ms(raw))
                try:
                    keys = message_keys(stored_message(store, raw, it.value()))
                except CorruptRecordError:
                    keys, unreadable = (), unreadable + 1
                for key in keys:
                    batch.put(K.index_entry(raw, key), b"", store._keys_h)
                    entries += 1
                if batch.len() >= REBUILD_CHUNK:
                    store._db.write(batch)
                    batch = WriteBatch(raw_mode=True)
                it.next()
            check_iterator(it, f"timer store {store.path} key index build")
        finally:
            del it
        _put_counters(store, dues, batch)
        batch.put(K.META_KEY_INDEX, K.KEY_INDEX_VERSION, store._meta_h)
        store._db.write(batch)
        store._keyed = entries > 0
        if dues:
            log.warning("timer store %s: built the key index (%d entries) and due counters "
                        "for %d pending keys", store.path, entries, len(dues))
        return {"keys": len(dues), "entries": entries, "unreadable": unreadable}


def check(store: "RocksTimerStore", expected_entries: set[bytes], dues: list[int]) -> list[str]:
    """Compare the index and the counters with what a full walk of the timer keys found
    (lock held). Entries of quarantined values may dangle; others may not."""
    return check_index(store._keys, store._due.stored(), store._corrupt_count, store.path,
                       expected_entries, dues)


def check_index(keys_family: Any, stored_counters: dict[bytes, int], corrupt_count: int,
                where: Any, expected_entries: set[bytes], dues: list[int]) -> list[str]:
    """:func:`check` on the parts it reads (a read-only open passes its own)."""
    problems: list[str] = []
    found: set[bytes] = set()
    dangling = 0
    opts = ReadOptions()
    opts.set_iterate_upper_bound(K.META_KEY_INDEX_PREFIX + b"\xff")
    it = keys_family.iter(opts)
    try:
        it.seek(K.META_KEY_INDEX_PREFIX)
        while it.valid():
            entry = bytes(it.key())
            if entry in expected_entries:
                found.add(entry)
            else:
                dangling += 1
            it.next()
        check_iterator(it, f"timer store {where} key index check")
    finally:
        del it
    missing = len(expected_entries) - len(found)
    if missing:
        problems.append(f"{missing} keyed messages lack their key index entry")
    if dangling and not corrupt_count:
        problems.append(f"{dangling} key index entries name no pending key")
    want, have = expected_counters(dues), stored_counters
    if want != have:
        wrong = sorted(set(want) ^ set(have) | {k for k in want if want[k] != have.get(k)})
        problems.append(f"{len(wrong)} due counters differ from the keys, first "
                        f"{wrong[0]!r}: {have.get(wrong[0], 0)} stored, {want.get(wrong[0], 0)} keys")
    return problems
