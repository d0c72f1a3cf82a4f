"""``Transaction``: the one way the RocksDB timer store changes its timer keys.

Four structures must stay exact after any crash: the index (the ``timer`` family), the value
segments' liveness rows (``vlog``), the key index with the due and topic counters, and the
counts (pending, set-aside, reconcile offset). They are kept exact by one order, owned here:

1. **stage**: the caller collects its changes (timer rows, :class:`IndexChanges`, liveness
   ``Changes``, count deltas) into one WriteBatch; :meth:`Transaction.commit` stages the
   liveness rows (``ValueLog.stage``, which first appends the removal records of dropped
   pointers), then the key index and counters (``KeyIndex.stage``), then the counts;
2. **write** the batch once (``Database.write``);
3. **apply** in memory, only once the write succeeded: liveness, key index and counters, counts.

A failed write applies nothing: memory still matches the disk. Every write site (send, send of
one, claim's set-aside, completion, cancel, cancel by key, reconcile, reschedule, relocation,
restore of set-aside messages) goes through here; so to change what a cancel does to the due
counters, change ``IndexChanges.removed`` (keyindex.py) or ``DueCounters.stage`` (duecount.py),
never a write site. The single send of a new key has its own short path
(:meth:`Writer.send_one`), the same order without a batch's bookkeeping, and so has the cancel of
one key in a store without KEYS entries (:meth:`Writer.cancel_one`: a pop's ack, a recall).
"""
from __future__ import annotations

from typing import Iterable

from rocksdict import WriteBatch

from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.counts import Counts
from rocks_timer.timer.rocksdb.database import Database
from rocks_timer.timer.rocksdb.keyindex import IndexChanges, KeyIndex
from rocks_timer.timer.rocksdb.vlog import ValueLog
from rocks_timer.timer.rocksdb.vlog.liveness import Changes


class Transaction:
    """One atomic change: what to write, staged in :attr:`batch`, and what it does to the
    counts, the key index (:attr:`index`) and the liveness rows (:attr:`live`, ``vlog`` only).
    Built under the store's lock by :meth:`Writer.begin`; :meth:`commit` once."""

    __slots__ = ("batch", "index", "live", "pending", "corrupt_to", "reconcile", "removed",
                 "lost", "vlog_counters", "_writer")

    def __init__(self, writer: "Writer", index: IndexChanges | None = None) -> None:
        self._writer = writer
        self.batch = WriteBatch(raw_mode=True)
        self.index = IndexChanges() if index is None else index
        self.live: Changes | None = Changes() if writer.vlog is not None else None
        self.pending = 0  # pending keys added (+) or removed (-)
        self.corrupt_to: int | None = None  # the new set-aside count, when it changes
        self.reconcile: int | None = None  # the new reconcile offset, when it changes
        self.removed = 0  # keys deleted (tombstones for the reclaim)
        self.lost = 0  # pointers set aside (vlog figures)
        self.vlog_counters = False  # stage the value log's counters even with no row changed

    # -- what it writes ---------------------------------------------------------------------
    def put(self, raw: bytes, value: bytes) -> None:
        self.batch.put(raw, value, self._writer.db.timer_h)

    def delete(self, raw: bytes) -> None:
        self.batch.delete(raw, self._writer.db.timer_h)

    def delete_range(self, begin: bytes, end: bytes) -> None:
        self.batch.delete_range(begin, end, self._writer.db.timer_h)

    def put_meta(self, name: bytes, value: bytes) -> None:
        self.batch.put(name, value, self._writer.db.meta_h)

    def remove_stored(self, found: list[tuple[bytes, bytes]]) -> None:
        """Delete stored keys (key, its index value) with everything that counts them: the
        pending count, liveness (with removal records), the key index and the counters."""
        keys = self._writer.keys
        for raw, value in found:
            self.delete(raw)
            self.index.removed(raw, keys.stored_keys(raw, value))
        self.drop_values([value for _, value in found])
        self.pending -= len(found)
        self.removed += len(found)

    def drop_values(self, index_values: list[bytes | None], delivered: bool = False) -> None:
        """Index values leaving the index: the bytes their pointers name stop counting live
        (``vlog``; nothing in ``inline``). Removal records are appended for them at stage
        time, except for deliveries: a rebuild knows those from the delivery cursor
        (``vlog/cursor``) and the CommitLog's stamped copies, and a removal record per segment
        per delivery batch cost deliveries too much (docs/BENCHMARKS.md, "What the
        rebuildable index costs")."""
        if self.live is None:
            return
        dropped = drop_pointers(self.live, index_values)
        if dropped and not delivered:
            self.live.removed(index_values)

    def set_aside(self, raw: bytes, value: bytes) -> None:
        """Move a pending key's index value to the ``corrupt`` family. Its KEYS cannot be read,
        so its key index entries dangle (readers check the timer key); its segment record stays
        counted live, so the segment is not released under it (export and restore read it)."""
        db = self._writer.db
        self.batch.put(raw, value, db.corrupt_h)
        self.batch.delete(raw, db.timer_h)
        self.index.removed(raw)
        self.pending -= 1
        self.removed += 1
        self.corrupt_to = (self._writer.counts.corrupt if self.corrupt_to is None
                           else self.corrupt_to) + 1
        if self.live is not None and I.is_pointer(value):  # vlog: counted in its figures
            self.lost += 1

    def retire_set_aside(self, raw_keys: list[bytes], index_entries: list[bytes]) -> None:
        """Set-aside rows put back by this batch's schedule (``restore``): their rows and the
        index entries their old keys left dangling go; the liveness their pointers held is
        dropped by the schedule (``drop`` of :func:`schedule_values`)."""
        writer = self._writer
        for raw in raw_keys:
            self.batch.delete(raw, writer.db.corrupt_h)
        writer.keys.stage_retired(index_entries, self.batch)
        self.corrupt_to = max(0, writer.counts.corrupt - len(raw_keys))

    # -- stage, write, apply ----------------------------------------------------------------
    def commit(self) -> None:
        writer = self._writer
        batch, vlog = self.batch, writer.vlog
        live = self.live
        new_live = vlog.stage(live, batch) if live or self.vlog_counters else None
        new_index = writer.keys.stage(self.index, batch)
        counts = writer.counts
        staged = counts.stage(batch, writer.db.meta_h, self.pending, self.corrupt_to,
                              self.reconcile)
        writer.db.write(batch)
        if new_live is not None:
            vlog.commit(new_live)
        if self.lost:
            vlog.note_lost(self.lost)
        writer.keys.commit(self.index, new_index)
        counts.apply(staged, self.removed, self.reconcile)


class Writer:
    """The parts a transaction changes, handed over once by the store: the database, the
    counts, the key index and the value log (None in ``inline``)."""

    __slots__ = ("db", "counts", "keys", "vlog")

    def __init__(self, db: Database, counts: Counts, keys: KeyIndex,
                 vlog: ValueLog | None) -> None:
        self.db, self.counts, self.keys, self.vlog = db, counts, keys, vlog

    def begin(self, index: IndexChanges | None = None) -> Transaction:
        """A transaction; ``index``: the key index changes collected beforehand, if any."""
        return Transaction(self, index)

    def send_one(self, raw: bytes, value: bytes, fields: tuple, due_ms: int,
                 now_ms: int) -> bool:
        """The common single send (a new key without KEYS): the writes the batch path makes
        for it, in the same order, without a batch's bookkeeping; in ``vlog`` a body above
        ``vlog_inline_max_bytes`` goes to its value segment first
        (tests/engines/rocksdb/test_schedule_single.py holds the two paths' stores equal byte
        for byte). False, having written nothing, when the key is stored already."""
        db = self.db
        if db.timer.get(raw) is not None:
            return False  # a retry: the batch path knows what it replaces
        batch = WriteBatch(raw_mode=True)
        vlog = self.vlog
        if vlog is not None and len(value) > vlog.inline_max:
            pointer, live = vlog.append_one(raw, value, due_ms, now_ms, fields, batch)
            batch.put(raw, pointer, db.timer_h)
        else:
            live = None
            batch.put(raw, value, db.timer_h)
        keys, counts = self.keys, self.counts
        counters = keys.stage_new(raw, due_ms, batch)
        counts.stage_one(batch, db.meta_h)
        db.write(batch)
        if live is not None:
            vlog.commit_one(live)
        keys.commit_new(counters)
        counts.apply_one()
        return True

    def cancel_one(self, raw: bytes, value: bytes) -> bool:
        """The common cancel (one stored key, ``value`` its index value, in a store that never
        indexed KEYS: a pop's ack, a recall): the writes :meth:`Transaction.remove_stored` and
        :meth:`Transaction.commit` make for it, in the same order, without a batch's
        bookkeeping (tests/engines/rocksdb/test_cancel_single.py holds the two paths' stores
        equal byte for byte). False, having written nothing, when the store has KEYS entries
        (the batch path reads the stored message's keys to delete them) or runs without the
        key index."""
        keys = self.keys
        if keys.keyed or not keys.enabled:
            return False
        db, vlog, counts = self.db, self.vlog, self.counts
        batch = WriteBatch(raw_mode=True)
        batch.delete(raw, db.timer_h)
        live = vlog.stage_removed_one(value, batch) if vlog is not None else None
        counters = keys.stage_removed(raw, batch)
        counts.stage_one(batch, db.meta_h, -1)
        db.write(batch)
        if live is not None:
            vlog.commit(live)
        keys.commit_new(counters)
        counts.apply_one(-1)
        return True


def schedule_values(txn: Transaction, raw_keys: list[bytes], values: list[bytes],
                    olds: dict[bytes, bytes | None], added: int, now_ms: int, fields: list,
                    dues: list[int] | None, vlog: ValueLog,
                    drop: Iterable[bytes] = ()) -> dict[bytes, bytes]:
    """``vlog``: bodies into the value log, pointers into ``txn``, liveness with them. A key
    already stored (a producer's retry) or repeated in the batch keeps only its last value
    live; the bytes it replaced stop counting. ``olds`` holds each distinct key's stored value;
    ``added`` how many keys are new; ``drop`` index values leaving elsewhere in the batch
    (restored set-aside rows). Returns the final index value of each re-sent key (the store
    re-points in-flight ones after the commit)."""
    live = txn.live
    fresh = added == len(raw_keys)  # every key new and distinct: all of it stays live
    index_values = vlog.append(raw_keys, values, now_ms, txn.batch, live, fields, dues,
                               live=fresh)
    final: dict[bytes, bytes] = {}
    if fresh:
        put = txn.put
        for raw, value in zip(raw_keys, index_values):
            put(raw, value)
    else:
        final = dict(zip(raw_keys, index_values))  # the last value of a repeated key wins
        for raw, value in final.items():
            before = olds[raw]
            txn.put(raw, value)
            if I.is_pointer(value):
                live.keep(value)
            if before is not None and I.is_pointer(before):
                live.drop(before)
    for value in drop:  # pointers of set-aside rows put back: their old bytes stop counting
        if I.is_pointer(value):
            live.drop(value)
    return final


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
