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
from rocks_timer.message import Message
from rocks_timer.timer.delivery import delivery_copy_py, native_copies
from rocks_timer.timer.store import DueRecord, TimerKey
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
        in_flight_new: dict[bytes, bytes | None] = {}
        vlog = store.vlog
        used_bytes, last = 0, None
        taken: list[tuple[bytes, bytes, I.Pointer | None, int]] = []
        it = store._timer.iter(read_opts)
        in_flight, pointer_of = store._in_flight, I.pointer_or_none
        key_of, value_of, step, valid = it.key, it.value, it.next, it.valid
        try:
            it.seek(store._claim_cursor)
            while valid() and len(taken) < max_messages:
                raw = key_of()
                if raw in in_flight:
                    step()
                    continue
                value = value_of()
                pointer = pointer_of(value) if vlog is not None else None
                size = pointer.length if pointer is not None else len(value)
                if taken and used_bytes + size > max_bytes:
                    break
                last = raw
                used_bytes += size
                taken.append((raw, value, pointer, size))
                step()
            check_iterator(it, f"timer store {store.path} claim")  # never a silent early end
        finally:
            del it, key_of, value_of, step, valid
        bodies = vlog.read_many([(raw, p) for raw, _, p, _ in taken if p is not None]) \
            if vlog is not None else {}
        good: list[tuple[bytes, bytes, bytes, int, bool]] = []
        values: list[bytes] = []
        dues: list[int] = []
        due_of, fixed, due_size = K.key_due_ms, K.FIXED_KEY_SIZE, K.DUE_SIZE
        for raw, index_value, pointer, size in taken:
            value = index_value
            if pointer is not None:
                value = bodies[raw]
                if type(value) is not bytes:
                    corrupt.append((raw, index_value, value))
                    continue
            elif I.is_pointer(value):  # a pointer too short to decode
                try:
                    I.decode_pointer(raw, value)
                except CorruptRecordError as exc:
                    corrupt.append((raw, index_value, exc))
                    continue
            if len(raw) != fixed + raw[due_size] or raw[due_size] == 0:
                try:
                    K.decode_key(raw)  # raises, naming what is wrong
                except CorruptRecordError as exc:
                    corrupt.append((raw, index_value, exc))
                    continue
            good.append((raw, index_value, value, size, pointer is not None))
            values.append(value)
            dues.append(due_of(raw))
        copies = native_copies(values, dues, now_ms)
        for (raw, index_value, value, size, pointed), copy, due in zip(good, copies, dues):
            message = None
            if copy is None:  # the reference decides, and reports a corrupt value
                try:
                    message = decode_value(raw, value)
                except CorruptRecordError as exc:
                    corrupt.append((raw, index_value, exc))
                    continue
                copy = delivery_copy_py(message, due, now_ms)
            claimed.append(ClaimedRecord(raw, value, size, copy, message))
            in_flight_new[raw] = index_value if pointed else None
        if corrupt:
            quarantine(store, corrupt)
        store._in_flight.update(in_flight_new)
        if last is not None:
            store._claim_cursor = K.key_successor(last)
    return claimed

class ClaimedRecord(DueRecord):
    """A claimed record whose key, message and handle are decoded only if someone reads them
    (the deliverer reads only ``copy``, ``size`` and ``token``)."""

    __slots__ = ("_key", "_message", "_value")

    def __init__(self, raw: bytes, value: bytes, size: int, copy, message=None):
        self.token, self.size, self.copy = raw, size, copy
        self._value, self._message, self._key = value, message, None

    @property
    def key(self) -> TimerKey:
        if self._key is None:
            self._key = K.decode_key(self.token)
        return self._key

    @property
    def message(self) -> Message:
        if self._message is None:
            self._message = decode_value(self.token, self._value)
        return self._message

    @property
    def handle(self) -> str:
        key = self.key
        return encode_handle(key.topic, key.due_ms, key.msg_id)


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
