"""What each index write of the ``vlog`` layout does to the value log: a schedule appends the
bodies and points the index at them; every removal (delivery, cancel, reconcile, quarantine)
drops the bytes it pointed at. The liveness rows change in the caller's WriteBatch
(``ValueLog.stage``) and in memory only once that batch is written (``commit``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

from rocksdict import WriteBatch

from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb import keyindex
from rocks_timer.timer.rocksdb.keyindex import IndexChanges
from rocks_timer.timer.rocksdb import meta as rocks_meta
from rocks_timer.timer.rocksdb import segments as S
from rocks_timer.timer.rocksdb.liveness import Changes, delay_class

if TYPE_CHECKING:
    from rocks_timer.message import Message
    from rocks_timer.timer.rocksdb.store import RocksTimerStore


def schedule_one_vlog(store: "RocksTimerStore", message: "Message", raw: bytes, value: bytes,
                      due_ms: int, now_ms: int) -> bool:
    """The common single send of the ``vlog`` layout (a new key, no KEYS, a body for a value
    segment): the writes :func:`schedule_vlog` makes for it, without a batch's bookkeeping
    (tests/test_schedule_single.py holds the two stores equal byte for byte). False, having written
    nothing, for any other send."""
    vlog = store.vlog
    if message.keys or len(value) <= vlog.inline_max or store._timer.get(raw) is not None:
        return False
    blob = S.frame_many([raw], [value])[0]
    seg, pos = vlog.append_arrival(delay_class(due_ms - now_ms), blob, now_ms)
    if due_ms > seg.max_due_ms:
        seg.max_due_ms = due_ms
    batch = WriteBatch(raw_mode=True)
    batch.put(raw, I.encode_pointer(seg.id, pos, len(blob), message.queue_id, len(message.body),
                                    message.tags), store._timer_h)
    batch.put(K.META_PENDING, rocks_meta.pack_u64(store._pending + 1), store._meta_h)
    new = vlog.stage({seg.id: (1, len(blob))}, batch)
    new_counts = store._due.stage({due_ms: 1}, batch)
    store._db.write(batch, store._write_opts)
    vlog.commit(new)
    store._due.commit(new_counts)
    store._pending += 1
    return True


def schedule_vlog(store: "RocksTimerStore", raw_keys: list[bytes], values: list[bytes], now_ms: int,
                   batch: WriteBatch, fields: list, olds: dict[bytes, bytes | None],
                   index_changes: IndexChanges, added: int, dues: list[int] | None = None,
                   drop: Sequence[bytes] = ()) -> None:
    """Bodies into the value log, pointers into the index, liveness in the same batch. A
    key already stored (a producer's retry) or repeated in the batch keeps only its last
    value live; the bytes it replaced stop counting. ``olds`` holds each distinct key's
    stored value; ``index_changes`` and ``added`` what the batch does to the key index, the
    due counters and the pending count (``keyindex.schedule_changes``); ``dues`` each key's
    due time; ``drop`` index values leaving elsewhere in the batch (restored set-aside rows)."""
    changes = Changes()
    put, timer_h = batch.put, store._timer_h
    fresh = added == len(raw_keys)  # every key new and distinct: all of it stays live
    index_values = store.vlog.append(raw_keys, values, now_ms, batch, changes, fields, dues,
                                     live=fresh)
    if fresh:
        for raw, value in zip(raw_keys, index_values):
            put(raw, value, timer_h)
        distinct = final = ()
    else:
        final = dict(zip(raw_keys, index_values))  # the last value of a repeated key wins
        distinct = list(final)
        for raw in distinct:
            value = final[raw]
            before = olds[raw]
            put(raw, value, timer_h)
            if I.is_pointer(value):
                changes.keep(value)
            if before is not None and I.is_pointer(before):
                changes.drop(before)
    for value in drop:  # pointers of set-aside rows put back: their old bytes stop counting
        if I.is_pointer(value):
            changes.drop(value)
    put(K.META_PENDING, rocks_meta.pack_u64(store._pending + added), store._meta_h)
    new = store.vlog.stage(changes, batch)
    new_counts = keyindex.stage(store, index_changes, batch)
    store._db.write(batch, store._write_opts)
    store.vlog.commit(new)
    keyindex.commit(store, index_changes, new_counts)
    store._pending += added
    for raw in distinct:
        if raw in store._in_flight:  # a retry of a key being delivered: completing it
            value = final[raw]  # must drop the copy the index now points at
            store._in_flight[raw] = value if I.is_pointer(value) else None


def stage_removed(store: "RocksTimerStore", index_values: Iterable[bytes | None], batch: WriteBatch,
                   lost: bool = False, delivered: bool = False) -> dict | None:
    """Liveness rows for index values leaving the index (vlog layout; None otherwise), and the
    removal records of those records, except for deliveries (``delivered``): a rebuild knows
    those from the delivery cursor (``vlog/cursor``, below which every key is delivered) and the
    CommitLog's stamped copies (above it), and a removal record per segment per delivery batch
    cost 14% of deliver/s at 2,000,000 month messages (DECISIONS, issue 30)."""
    if store.vlog is None:
        return None
    changes = Changes()
    if type(index_values) is not list:
        index_values = list(index_values)
    dropped = drop_pointers(changes, index_values)
    if lost and dropped:
        store.vlog.note_lost(dropped)
    elif dropped and not delivered:  # set-aside records keep theirs: a rebuild may recover them
        store.vlog.mark_dead(store.vlog.dead_of(index_values))
    return store.vlog.stage(changes, batch) if changes or lost else None


def drop_pointers_py(changes: dict, index_values: Iterable[bytes | None]) -> int:
    """Take each pointer among ``index_values`` out of ``changes`` (segment id -> [count,
    bytes]); None and inline values are skipped. Returns how many it took. The reference of the
    native ``drop_pointers`` (a delivery batch drops thousands)."""
    dropped = 0
    unpack, size, version = I.POINTER.unpack_from, I.SIZE, I.POINTER_VERSION
    for value in index_values:
        if value is not None and len(value) >= size and value[0] == version:
            _, seg, _, length = unpack(value)[:4]
            entry = changes.get(seg)
            if entry is None:
                changes[seg] = [-1, -length]
            else:
                entry[0] -= 1
                entry[1] -= length
            dropped += 1
    return dropped


try:
    from rocks_timer._native.codec import drop_pointers
except ImportError:  # pragma: no cover - no C compiler at install time
    drop_pointers = drop_pointers_py


def commit_removed(store: "RocksTimerStore", new: dict | None) -> None:
    if new:
        store.vlog.commit(new)
