"""Background work of the RocksDB timer store, as objects that own their threads.

- :class:`Worker`: one daemon thread at a time for one kind of work; a store closed meanwhile
  ends it quietly, any other failure is counted (``reclaim_failures`` in stats) and logged, and
  the next ``maintain`` tries again. ``join`` is what ``close`` and ``wait_for_maintenance``
  use.
- :class:`TombstoneReclaimer`: range-deletes (and, inline, compacts) everything below the
  cursor once enough deletes piled up.
- :class:`VlogHousekeeping` (``vlog`` only): the periodic segment sync (async mode, handed to
  the ``BackgroundSync`` thread), the delivery cursor file, sealing, the ``meta`` flush per
  ``META_FLUSH_EVERY`` body bytes, prefetch hints, and the release and relocation workers, which
  run the value log's GC (:mod:`rocks_timer.timer.rocksdb.vlog.gc`) through
  :class:`SegmentIndex`, the store side of its ``IndexSide`` protocol.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from rocksdict import BottommostLevelCompaction, CompactOptions, ReadOptions, WriteBatch

from rocks_timer.errors import StoreClosedError
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.claims import Claims
from rocks_timer.timer.rocksdb.counts import Counts
from rocks_timer.timer.rocksdb.database import META_CF, Database
from rocks_timer.timer.rocksdb.scan import check_iterator
from rocks_timer.timer.rocksdb.transaction import Writer
from rocks_timer.timer.rocksdb.vlog import ValueLog, gc
from rocks_timer.timer.rocksdb.vlog.liveness import Segment, durable_rows
from rocks_timer.timer.rocksdb.vlog.syncer import BackgroundSync

log = logging.getLogger(__name__)

BACKLOG_RECLAIM_FACTOR = 10  # see TombstoneReclaimer.maybe_start
PREFETCH_BUDGET = 20_000  # index entries examined per maintain call
# Every batch writes ``meta``, whose memtable grows slowly (counters, liveness rows): left
# alone it would keep every WAL file alive. Flushing it per this many body bytes lets the WAL
# go with the index memtable's own flushes, without flushing the index early (a WAL size cap
# did that, and its small index SSTs cost more compaction; every 32 MiB, meta's due counters
# made many small flushes and their compactions; docs/BENCHMARKS.md has the figures).
META_FLUSH_EVERY = 256 << 20


class Failures:
    """How many background runs failed (shared by a store's workers, for ``stats``)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class Worker:
    """Runs one kind of background work on a daemon thread of its own, one run at a time."""

    def __init__(self, name: str, what: str, where: Any, failures: Failures) -> None:
        self._name, self._what, self._where = name, what, where
        self._failures = failures
        self._thread: threading.Thread | None = None

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, work: Callable[..., Any], *args: Any) -> None:
        thread = threading.Thread(target=self._quietly, args=(work, args), name=self._name,
                                  daemon=True)
        self._thread = thread
        thread.start()

    def join(self, timeout_s: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _quietly(self, work: Callable[..., Any], args: tuple) -> None:
        try:
            work(*args)
        except StoreClosedError:
            pass
        except Exception:  # noqa: BLE001 - counted and logged; the next maintain retries
            self._failures.count += 1
            log.exception("timer store %s: %s failed", self._where, self._what)


def _force_bottommost() -> CompactOptions:
    opts = CompactOptions()
    opts.set_bottommost_level_compaction(BottommostLevelCompaction.force_optimized())
    return opts


class TombstoneReclaimer:
    """Owns the tombstone reclaim: when it runs (``maybe_start``), what it has reclaimed
    (``reclaimed_below``) and whether the last claim filled its budget (``backlog``)."""

    def __init__(self, db: Database, claims: Claims, counts: Counts, lock: threading.Lock,
                 maint_lock: threading.Lock, check_open: Callable[[], None], inline: bool,
                 reclaim_after_deletes: int, where: Any, failures: Failures) -> None:
        self._db, self._claims, self._counts = db, claims, counts
        self._lock, self._maint_lock, self._check_open = lock, maint_lock, check_open
        self._inline = inline
        self.reclaim_after_deletes = reclaim_after_deletes
        self._reclaimed_below = b""
        self.backlog = False  # the last claim filled its budget
        self.worker = Worker("rocks-reclaim", "tombstone reclaim", where, failures)

    def maybe_start(self) -> None:
        """Start a reclaim on a background thread once enough deletes piled up (or a drained
        store has some): the forced compaction can take seconds and must not stall deliveries.

        While a backlog drains (the last claim filled its budget) the reclaim waits, up to ten
        times the usual number of deletes: claims seek from the cursor, so the tombstones below
        it cost them nothing, and an inline store's forced compaction would rewrite the keys
        not yet delivered on every round (a million due at once: ten rounds, seconds of
        compaction CPU beside the drain, docs/BENCHMARKS.md). Call with the store's lock."""
        deletes = self._counts.deletes
        every = self.reclaim_after_deletes
        if self.backlog and deletes < BACKLOG_RECLAIM_FACTOR * every:
            return
        due = deletes >= every or (self._counts.pending == 0 and deletes >= every // 10)
        if due and not self.worker.running():
            self.worker.start(self.reclaim)

    def reclaim(self) -> dict[str, Any]:
        """Range-delete and compact everything below the cursor (no key can land there again),
        so the point tombstones of delivered keys stop costing reads and space."""
        with self._maint_lock:
            with self._lock:
                self._check_open()
                cursor = self._claims.persisted()
                deletes = self._counts.take_deletes()
                if not cursor or cursor <= self._reclaimed_below:
                    return {"reclaimed": False, "deletes": deletes}
                batch = WriteBatch(raw_mode=True)
                batch.delete_range(b"", cursor, self._db.timer_h)
                self._db.write(batch)
            # outside the lock: claims and sends go on; the range below the cursor is frozen.
            # inline: the deleted bodies hold disk until compaction drops them, so compact now.
            # vlog: the index is small and scans start at the cursor; a forced compaction
            # would rewrite every index SST (keys arrive in random due order, so each SST spans
            # the whole key range) for little space: the tombstone is left to compaction.
            if self._inline:
                self._db.timer.compact_range(None, cursor, _force_bottommost())
            self._reclaimed_below = cursor
            return {"reclaimed": True, "deletes": deletes, "below_due_ms": K.key_due_ms(cursor)}

    def compact_all(self, flush_first: Callable[[], None]) -> None:
        """Full manual compaction of the timer family (``rtimer compact``)."""
        with self._maint_lock:
            with self._lock:
                self._check_open()
            flush_first()
            self._db.timer.compact_range(None, None, _force_bottommost())


class SegmentIndex:
    """The store side of the value log GC's ``IndexSide``: reads and re-points index entries
    through the store's transaction, under the store's lock."""

    def __init__(self, db: Database, claims: Claims, writer: Writer, lock: threading.Lock,
                 is_closed: Callable[[], bool], check_open: Callable[[], None],
                 make_durable: Callable[[], None]) -> None:
        self._db, self._claims, self._writer = db, claims, writer
        self.lock = lock
        self._is_closed, self._check_open = is_closed, check_open
        self._make_durable = make_durable

    def closed(self) -> bool:
        return self._is_closed()

    def check_open(self) -> None:
        self._check_open()

    def index_values(self, keys: list[bytes]) -> list[bytes | None]:
        claims = self._claims
        return [None if value is None or key in claims else value
                for key, value in zip(keys, self._db.timer.get(keys))]

    def repoint(self, target: int, moves: list[tuple[bytes, bytes, bytes]],
                orphans: list[int]) -> None:
        txn = self._writer.begin()
        live = txn.live
        live.add(target, 0, 0)  # its end moved
        for offset in orphans:
            live.orphan(target, offset)
        for key, seen, new_value in moves:
            txn.put(key, new_value)
            live.drop(seen)
            live.keep(new_value)
        txn.commit()

    def make_durable(self) -> None:
        self._make_durable()

    def durable_rows(self, segs: list[Segment]) -> dict[int, bytes | None]:
        return durable_rows(self._db.meta, segs)

    def forget(self, segs: list[Segment]) -> int:
        txn = self._writer.begin()
        freed = self._writer.vlog.forget(segs, txn.batch)
        txn.vlog_counters = True  # the released figures
        txn.commit()
        return freed


class VlogHousekeeping:
    """Owns the ``vlog`` layout's periodic work and its timing state: the last segment sync,
    the last cursor file write, the ``meta`` flush mark, how far prefetch has hinted, and the
    workers of the meta flush, the release and the relocation."""

    def __init__(self, db: Database, claims: Claims, vlog: ValueLog, side: SegmentIndex,
                 config: Any, lock: threading.Lock, is_closed: Callable[[], bool],
                 flush_meta: Callable[[], None], where: Any, failures: Failures) -> None:
        self._db, self._claims, self._vlog, self._side = db, claims, vlog, side
        self._config, self._lock, self._is_closed = config, lock, is_closed
        self._flush_meta = flush_meta
        self._where = where
        self.syncer = BackgroundSync(f"vlog-sync {getattr(where, 'name', where)}")
        self._last_sync_ms = 0
        self._cursor_written_ms = 0
        self._meta_flushed_at = 0
        self._prefetched_to = b""
        self.meta_flusher = Worker("vlog-meta-flush", "flushing meta", where, failures)
        self.releaser = Worker("vlog-release", "releasing empty vlog segments", where, failures)
        self.relocator = Worker("vlog-relocate", "vlog relocation", where, failures)

    def workers(self) -> tuple[Worker, ...]:
        return (self.relocator, self.releaser, self.meta_flusher)

    def maintain(self, now_ms: int) -> None:
        vlog, config = self._vlog, self._config
        hints: list[I.Pointer] = []
        with self._lock:
            if self._is_closed():
                return
            sync = (vlog.dirty and not vlog.sync_writes
                    and now_ms - self._last_sync_ms >= config.timer_flush_interval_ms)
            if sync:
                self._last_sync_ms = now_ms
                dirty = vlog.take_dirty()
            cursor = None
            if now_ms - self._cursor_written_ms >= config.timer_flush_interval_ms:
                self._cursor_written_ms = now_ms
                cursor = self._claims.persisted()
            vlog.seal(now_ms)
            appended = vlog.counters[K.META_VLOG_COUNTERS[0]]
            flush_meta = appended - self._meta_flushed_at >= META_FLUSH_EVERY \
                and not self.meta_flusher.running()
            if flush_meta:
                self._meta_flushed_at = appended
            if config.vlog_prefetch_ms:
                hints = self._due_soon(now_ms, now_ms + config.vlog_prefetch_ms)
            empty = vlog.releasable()
        if sync:  # on a thread of its own: deliveries never wait for the disk here (syncer.py)
            self.syncer.request(dirty)
        if cursor is not None:  # outside the lock: two fsyncs every flush interval at most
            vlog.write_cursor(cursor)
        if hints:
            vlog.will_need(hints)
        if flush_meta:  # after the value bytes its liveness rows count (a background sync first)
            self.meta_flusher.start(self._flush_meta)
        if empty and not self.releaser.running():
            self.releaser.start(gc.release_empty, vlog, self._side)
        if not self.relocator.running():
            todo = gc.pick(vlog, self._side, config, now_ms)
            if todo:
                self.relocator.start(gc.relocate_all, vlog, self._side, todo, now_ms)

    def _due_soon(self, now_ms: int, horizon_ms: int) -> list[I.Pointer]:
        """Pointers of index entries due after ``now_ms`` up to ``horizon_ms`` not hinted yet
        (lock held). Entries due already are not hinted: the claim reads them at once."""
        start = max(self._prefetched_to, self._claims.cursor, K.due_prefix(now_ms + 1))
        bound = K.due_prefix(horizon_ms + 1)
        if start >= bound:
            return []
        read_opts = ReadOptions()
        read_opts.set_iterate_upper_bound(bound)
        out: list[I.Pointer] = []
        last = None
        it = self._db.timer.iter(read_opts)
        try:
            it.seek(start)
            while it.valid() and len(out) < PREFETCH_BUDGET:
                last = it.key()
                pointer = I.pointer_or_none(it.value())
                if pointer is not None:
                    out.append(pointer)
                it.next()
            full = it.valid()
            check_iterator(it, f"timer store {self._where} prefetch")
        finally:
            del it
        self._prefetched_to = K.key_successor(last) if full and last is not None else bound
        return out

    def close(self) -> None:
        self.syncer.close()


__all__ = ["BACKLOG_RECLAIM_FACTOR", "Failures", "META_CF", "SegmentIndex",
           "TombstoneReclaimer", "VlogHousekeeping", "Worker"]
