"""``Counts``: the exact counters of the RocksDB timer store.

Durable ones (pending keys, set-aside messages, the reconciled CommitLog offset) live in
``meta`` and change only in the WriteBatch of the change they count: the one writer is the
transaction (:mod:`rocks_timer.timer.rocksdb.transaction`), which stages the new rows before
its write and applies them here after it. The pending count has a row of its own only while
the key index is off: with it on, the per-topic counters the key index writes in the same
batch sum to it, so a send writes one counter row for both (docs/DECISIONS.md, "The pending
count lives in the topic counters"); the open tells which (:meth:`Counts.opened`). The
in-memory ones (deletes since the last tombstone reclaim, corrupt values skipped by scans)
are figures for maintenance and ``stats``.
"""
from __future__ import annotations

from rocksdict import WriteBatch

from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb.meta import StoredState, pack_u64


class Counts:
    """Owns the pending count, the set-aside count, the reconcile offset and the delete and
    scan-skip figures of one store. Read under the store's lock; changed only through
    :meth:`stage` / :meth:`apply` (the transaction) and the two figure methods."""

    __slots__ = ("pending", "pending_row", "corrupt", "reconcile_offset", "deletes",
                 "scan_skipped")

    def __init__(self, state: StoredState) -> None:
        self.pending = state.pending
        self.pending_row = True  # until the open says the topic counters hold it (opened)
        self.corrupt = state.corrupt
        self.reconcile_offset = state.reconcile_offset
        self.deletes = 0  # keys removed since the last tombstone reclaim
        self.scan_skipped = 0  # corrupt values a scan stepped over

    def opened(self, pending: int, row: bool) -> None:
        """The last step of the open: the durable pending count, and whether it has its own
        ``meta`` row (the key index off) or is the sum of the topic counters (on)."""
        self.pending, self.pending_row = pending, row

    def stage(self, batch: WriteBatch, meta_h: object, pending_delta: int,
              corrupt_to: int | None, reconcile: int | None) -> tuple[int, int]:
        """Put the rows that change into ``batch``; returns (pending, corrupt) for
        :meth:`apply`. ``corrupt_to``: the new set-aside count (None: unchanged)."""
        pending = self.pending + pending_delta
        if pending_delta and self.pending_row:
            batch.put(K.META_PENDING, pack_u64(pending), meta_h)
        corrupt = self.corrupt
        if corrupt_to is not None:
            corrupt = corrupt_to
            batch.put(K.META_CORRUPT, pack_u64(corrupt), meta_h)
        if reconcile is not None:
            batch.put(K.META_RECONCILE_OFFSET, pack_u64(reconcile), meta_h)
        return pending, corrupt

    def stage_one(self, batch: WriteBatch, meta_h: object, delta: int = 1) -> None:
        """:meth:`stage` of one added key (the single send; ``delta`` -1: one removed key,
        the single cancel); :meth:`apply_one` with the same ``delta`` after it."""
        if self.pending_row:
            batch.put(K.META_PENDING, pack_u64(self.pending + delta), meta_h)

    def apply_one(self, delta: int = 1) -> None:
        self.pending += delta
        if delta < 0:
            self.deletes -= delta

    def apply(self, staged: tuple[int, int], removed: int, reconcile: int | None) -> None:
        """After the batch :meth:`stage` filled is written."""
        self.pending, self.corrupt = staged
        self.deletes += removed
        if reconcile is not None:
            self.reconcile_offset = reconcile

    def take_deletes(self) -> int:
        """The deletes since the last reclaim, and start counting again (the reclaim)."""
        deletes, self.deletes = self.deletes, 0
        return deletes

    def note_scan_skipped(self, n: int) -> None:
        self.scan_skipped += n
