"""The claim walk of the RocksDB store: due keys from the cursor, never early, bounded by a
budget; in ``vlog`` each body is read from its value segment. A value that does not decode, or
a segment record that is damaged, short, missing or holds another key, is set aside in the
``corrupt`` column family (``quarantine``), counted and logged, never delivered and never a
reason to stop: the keys after it are claimed as usual.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rocksdict import ReadOptions, WriteBatch

from rocks_timer.errors import CorruptRecordError
from rocks_timer.timer import keys as K
from rocks_timer.timer.handles import encode_handle
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb import keyindex
from rocks_timer.timer.rocksdb.keyindex import IndexChanges
from rocks_timer.timer.rocksdb.scan import check_iterator
from rocks_timer.timer.rocksdb import meta as rocks_meta
from rocks_timer.timer.rocksdb.layout import commit_removed, stage_removed
from rocks_timer.timer.store import DueRecord
from rocks_timer.timer.values import decode_value

if TYPE_CHECKING:
    from rocks_timer.timer.rocksdb.store import RocksTimerStore

log = logging.getLogger(__name__)


def claim_due(store: "RocksTimerStore", now_ms: int, max_messages: int, max_bytes: int) -> list[DueRecord]:
    claimed: list[DueRecord] = []
    if max_messages <= 0:
        return claimed
    with store._lock:
        store._check_open()
        read_opts = ReadOptions()
        read_opts.set_iterate_upper_bound(K.due_prefix(now_ms + 1))  # never early
        corrupt: list[tuple[bytes, bytes, CorruptRecordError]] = []
        pointers: dict[bytes, bytes | None] = {}
        vlog = store.vlog
        used_bytes, last = 0, None
        taken: list[tuple[bytes, bytes, I.Pointer | None, int]] = []
        it = store._timer.iter(read_opts)
        try:
            it.seek(store._claim_cursor)
            while it.valid() and len(taken) < max_messages:
                raw = it.key()
                if raw in store._in_flight:
                    it.next()
                    continue
                value = it.value()
                pointer = I.pointer_or_none(value) if vlog is not None else None
                size = pointer.length if pointer is not None else len(value)
                if taken and used_bytes + size > max_bytes:
                    break
                last = raw
                used_bytes += size
                taken.append((raw, value, pointer, size))
                it.next()
            check_iterator(it, f"timer store {store.path} claim")  # never a silent early end
        finally:
            del it
        bodies = vlog.read_many([(raw, p) for raw, _, p, _ in taken if p is not None]) \
            if vlog is not None else {}
        for raw, index_value, pointer, size in taken:
            try:
                key = K.decode_key(raw)
                value = index_value
                if pointer is not None:
                    value = bodies[raw]
                    if isinstance(value, CorruptRecordError):
                        raise value
                elif I.is_pointer(value):  # a pointer too short to decode
                    I.decode_pointer(raw, value)
                message = decode_value(raw, value)
            except CorruptRecordError as exc:
                corrupt.append((raw, index_value, exc))
            else:
                claimed.append(DueRecord(
                    key=key, message=message, size=size, token=raw,
                    handle=encode_handle(key.topic, key.due_ms, key.msg_id)))
                pointers[raw] = index_value if pointer is not None else None
        if corrupt:
            quarantine(store, corrupt)
        store._in_flight.update(pointers)
        if last is not None:
            store._claim_cursor = K.key_successor(last)
    return claimed

def quarantine(store: "RocksTimerStore", corrupt: list[tuple[bytes, bytes, CorruptRecordError]]) -> None:
    """Move undecodable values to the ``corrupt`` family (one batch); never deliver them."""
    batch = WriteBatch(raw_mode=True)
    for raw, value, exc in corrupt:
        batch.put(raw, value, store._corrupt_h)
        batch.delete(raw, store._timer_h)
        log.error("timer store %s: quarantined key %s (%d value bytes): %s",
                  store.path, raw.hex(), len(value), exc)
    pending = store._pending - len(corrupt)
    count = store._corrupt_count + len(corrupt)
    batch.put(K.META_PENDING, rocks_meta.pack_u64(pending), store._meta_h)
    batch.put(K.META_CORRUPT, rocks_meta.pack_u64(count), store._meta_h)
    changes = IndexChanges()  # its KEYS cannot be read: its index entries dangle (keyindex)
    for raw, _, _ in corrupt:
        changes.removed(raw)
    new = stage_removed(store, [value for _, value, _ in corrupt], batch, lost=True)
    new_counts = keyindex.stage(store, changes, batch)
    store._write(batch)
    commit_removed(store, new)
    keyindex.commit(store, changes, new_counts)
    store._pending, store._corrupt_count = pending, count
    store._deletes_since_reclaim += len(corrupt)
