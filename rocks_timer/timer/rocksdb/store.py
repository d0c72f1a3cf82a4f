"""``RocksTimerStore``: the RocksDB timer engine (RIP-43 option B), on rocksdict in raw mode.

Column families: ``timer`` (the index: key = due + topic + msg id, value = the encoded message in
the ``inline`` layout, a pointer into a value segment in the ``vlog`` layout, see ``index``),
``meta`` (format settings, persisted cursor, reconcile offset, exact counters, the key index,
the value segments' liveness rows) and ``corrupt`` (values that failed to decode or whose
segment record is damaged, kept byte for byte under their key).

The store composes parts that own their state (docs/DECISIONS.md, "RocksDB engine: parts and
owners"): the database (``database.Database``), the claim cursor and in-flight set
(``claims.Claims``), the counts (``counts.Counts``), the key index with its due and topic
counters (``keyindex.KeyIndex``), the value log (the ``vlog`` package, ``vlog`` layout only),
the background work (``background``), and the services that use them (``claim.Claimer``,
``complete``, ``reschedule.Rescheduler``). Every change of the timer keys is one
``transaction.Transaction``: stage, write, apply.

Concurrency: one lock (``_lock``) covers every read-modify-write: the in-flight set, the claim
cursor, the counters and each transaction. Claims, cancels and schedules therefore see one
order: a cancel that returns True happened before any claim of the key, and a schedule's clamp
is decided against the same cursor the claim advances (rocksdict holds the GIL for writes and
iteration anyway, so the lock costs no parallelism).
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from rocksdict import ReadOptions

from rocks_timer.config import BrokerConfig
from rocks_timer.errors import InvalidHandleError, InvalidMessageError, StoreClosedError
from rocks_timer.timer import keys as K
from rocks_timer.timer.handles import decode_handle
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb import maint, opening, setaside
from rocks_timer.timer.rocksdb.background import (Failures, SegmentIndex, TombstoneReclaimer,
                                                  VlogHousekeeping)
from rocks_timer.timer.rocksdb.claim import Claimer
from rocks_timer.timer.rocksdb.claims import Claims
from rocks_timer.timer.rocksdb.complete import complete as complete_records
from rocks_timer.timer.rocksdb.counts import Counts
from rocks_timer.timer.rocksdb.database import CORRUPT_CF, META_CF, TIMER_CF, Database
from rocks_timer.timer.rocksdb.keyindex import KeyIndex
from rocks_timer.timer.rocksdb.meta import StoredState, pack_u64
from rocks_timer.timer.rocksdb.reschedule import Rescheduler
from rocks_timer.timer.rocksdb.scan import (check_iterator, collect_pending, resume_handle,
                                            scan_start)
from rocks_timer.timer.rocksdb.transaction import Writer, schedule_values
from rocks_timer.timer.rocksdb.vlog import ValueLog, gc
from rocks_timer.timer.rocksdb.vlog.syncer import sync_segments
from rocks_timer.timer.schedule_codec import encode_schedule
from rocks_timer.timer.store import (Compacting, DueRecord, KeyCancel, Rescheduled, ScanPage,
                                     Scheduled, StoreStats, TimerKey, TimerRecord, TimerStore,
                                     new_scheduled)

if TYPE_CHECKING:
    from rocks_timer.timer.rocksdb.recovery import RepairReport

log = logging.getLogger(__name__)

RECLAIM_AFTER_DELETES = 100_000
SCAN_EXAMINE_MIN = 1_000


def _raw_of(handle: str) -> bytes:
    parsed = decode_handle(handle)
    try:
        return K.encode_key(TimerKey(parsed.due_ms, parsed.topic, parsed.msg_id))
    except InvalidMessageError as exc:
        raise InvalidHandleError(f"handle {handle!r} names no possible key: {exc}") from None


class RocksTimerStore(TimerStore, Compacting):
    """Owns one RocksDB directory holding pending timer messages, the delivery cursor, the
    reconcile checkpoint and the set-aside (quarantined) values, through its parts: ``db``
    (the database), ``key_index`` (business keys, due and topic counters) and private ones
    (claims, counts, value log, background work). ``db`` and ``key_index`` are public for
    tools and tests that look below the ``TimerStore`` protocol."""

    name = "rocksdb"
    exactly_once = True
    forgets_on_complete = True  # complete() deletes keys: the deliverer syncs the CommitLog first

    def __init__(self, path: Path, config: BrokerConfig, db: Database, state: StoredState,
                 reclaim_after_deletes: int, key_index: bool = True) -> None:
        """Use :meth:`open`."""
        self.path = path
        self.config = config
        self.profile = config.rocksdb_profile
        self.layout = state.layout
        self.index_compaction = state.index_compaction
        self.meta_compaction = state.meta_compaction
        self.db = db
        self._lock = threading.Lock()
        self._maint_lock = threading.Lock()  # compaction runs outside _lock; close waits for it
        self._sync_lock = threading.Lock()  # so does the WAL sync of ``sync``: sends go on
        # held by every write that appends value bytes (taken before ``_lock``) and by the WAL
        # sync of ``sync_values_then_wal``: no index entry reaches a synced WAL before the bytes
        # it points at are synced (the crash order of the vlog layout), while claims and
        # completions go on
        self._append_fence = threading.Lock()
        self._closed = False
        self._vlog: ValueLog | None = None
        if self.layout == "vlog":
            self._vlog = ValueLog(path / "vlog", config, db.meta, db.meta_h)
        self._claims = Claims(state.cursor)
        self._counts = Counts(state)
        self.key_index = KeyIndex(db, self._read_value, path, enabled=key_index)
        self._writer = Writer(db, self._counts, self.key_index, self._vlog)
        self._claimer = Claimer(db, self._claims, self._vlog, self._writer, path)
        self._rescheduler = Rescheduler(db, self._claims, self.key_index, self._writer,
                                        self._vlog, config.timer_compress_threshold)
        self._failures = Failures()
        self._reclaimer = TombstoneReclaimer(
            db, self._claims, self._counts, self._lock, self._maint_lock, self._check_open,
            self._vlog is None, reclaim_after_deletes, path, self._failures)
        self._segment_index: SegmentIndex | None = None
        self._housekeeping: VlogHousekeeping | None = None
        if self._vlog is not None:
            self._segment_index = SegmentIndex(db, self._claims, self._writer, self._lock,
                                               self._is_closed, self._check_open,
                                               self.sync_values_then_wal)
            self._housekeeping = VlogHousekeeping(
                db, self._claims, self._vlog, self._segment_index, config, self._lock,
                self._is_closed, self._flush_meta, path, self._failures)
            if self._vlog.voided:  # the void records' rows (valuelog.py)
                txn = self._writer.begin()
                for seg_id in self._vlog.voided:
                    txn.live.add(seg_id, 0, 0)
                txn.commit()

    @property
    def vlog(self) -> ValueLog | None:
        """The value log (``vlog`` layout), None in ``inline``."""
        return self._vlog

    @property
    def reclaim_after_deletes(self) -> int:
        return self._reclaimer.reclaim_after_deletes

    # -- open / close -------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path, config: BrokerConfig, *,
             reclaim_after_deletes: int = RECLAIM_AFTER_DELETES,
             key_index: bool = True) -> "RocksTimerStore":
        """Open (or create) the store at ``path``; ConfigError on a format mismatch or unknown
        profile, StoreLockedError when another process or open store holds it
        (:mod:`rocks_timer.timer.rocksdb.opening`). ``key_index=False`` is a measurement
        baseline (``bench.keys``): no key index, due or topic counters are kept, the calls
        that need them refuse with ConfigError, and the next ordinary open rebuilds them."""
        path = Path(path)
        db, state = opening.open_database(path, config)
        store = opening.construct(path, db, lambda: cls(path, config, db, state,
                                                        reclaim_after_deletes, key_index))
        opening.finish(path, store, store.finish_open)
        return store

    def finish_open(self) -> None:
        """The last step of :meth:`open` (run once, by it): the key index built (or upgraded),
        then the pending count from where it is durable (the topic counters, or its own row
        when the store runs without the key index)."""
        pending = self.key_index.ensure_built()
        self._counts.opened(pending, row=not self.key_index.enabled)

    def close(self) -> None:
        """Flush and release the DB (idempotent). Handles are dropped first: a live column
        family handle or iterator would keep the RocksDB LOCK held after close."""
        self._reclaimer.worker.join()
        if self._housekeeping is not None:
            for worker in self._housekeeping.workers():
                worker.join()
            self._housekeeping.close()
        with self._sync_lock, self._maint_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            if self._vlog is not None:
                self._vlog.write_cursor(self._claims.persisted())
                self._vlog.close()
            self.key_index.close()
            self._claims.clear()
            self.db.close()

    def __enter__(self) -> "RocksTimerStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"timer store {self.path} is closed")

    def _is_closed(self) -> bool:
        return self._closed

    def _read_value(self, raw: bytes, value: bytes) -> bytes:
        """The stored value's bytes behind an index value (``vlog``: read from its segment)."""
        pointer = I.pointer_or_none(value) if self._vlog is not None else None
        return self._vlog.read(raw, pointer) if pointer is not None else value

    # -- TimerStore ---------------------------------------------------------------------------
    def schedule(self, records: Sequence[TimerRecord], now_ms: int, *,
                 retire: Sequence[tuple[bytes, bytes]] = (),
                 retire_index_entries: Sequence[bytes] = ()) -> list[Scheduled]:
        """Store ``records``; ``retire``: set-aside rows (key, index value) these records put
        back, removed in the same transaction (``setaside.restore``)."""
        if type(records) is not list:
            records = list(records)
        if not records:
            return []
        vlog = self._vlog
        with self._append_fence, self._lock:
            self._check_open()
            raw_keys, values, key_dues, handles = encode_schedule(
                records, self._claims.low_watermark_ms(), self.config.timer_compress_threshold)
            if len(raw_keys) == 1 and not retire:
                message = records[0].message
                if not message.keys and self._writer.send_one(
                        raw_keys[0], values[0], (message.queue_id, len(message.body),
                                                 message.tags), key_dues[0], now_ms):
                    return [Scheduled(handles[0], key_dues[0])]
            olds = self._old_values(raw_keys)
            changes, added = self.key_index.schedule_changes(raw_keys, records, olds, key_dues)
            txn = self._writer.begin(changes)
            txn.pending = added
            if retire:
                txn.retire_set_aside([raw for raw, _ in retire], list(retire_index_entries))
            if vlog is not None:
                fields = [(m.queue_id, len(m.body), m.tags)
                          for m in [r.message for r in records]]
                final = schedule_values(txn, raw_keys, values, olds, added, now_ms, fields,
                                        key_dues, vlog, drop=[value for _, value in retire])
                txn.commit()
                for raw, value in final.items():  # a retry of a key being delivered:
                    # completing it must drop the copy the index now points at
                    self._claims.repointed(raw, value if I.is_pointer(value) else None)
            else:
                put = txn.put
                for raw, value in zip(raw_keys, values):
                    put(raw, value)
                txn.commit()
        return list(map(new_scheduled, zip(handles, key_dues)))

    def _old_values(self, raw_keys: list[bytes]) -> dict[bytes, bytes | None]:
        """The stored value of each distinct key of a schedule batch (None: a new key), so
        the pending count stays exact (a producer's retry of the same key adds nothing)."""
        timer = self.db.timer
        if len(raw_keys) == 1:  # a single send: a point get is half a one-key multi-get
            return {raw_keys[0]: timer.get(raw_keys[0])}
        distinct = list(dict.fromkeys(raw_keys))  # a batch may repeat a key
        return dict(zip(distinct, timer.get(distinct)))

    def claim_due(self, now_ms: int, max_messages: int, max_bytes: int) -> list[DueRecord]:
        if max_messages <= 0:
            return []
        with self._lock:
            self._check_open()
            batch, self._reclaimer.backlog = self._claimer.claim(now_ms, max_messages,
                                                                 max_bytes)
            return batch

    def complete(self, records: Sequence[DueRecord], commitlog_end: int | None) -> None:
        with self._lock:
            self._check_open()
            complete_records(self._claims, self.key_index, self._writer, records,
                             commitlog_end)

    def cancel(self, handle: str, now_ms: int) -> bool:
        raw = _raw_of(handle)
        with self._lock:
            self._check_open()
            value = None if raw in self._claims else self.db.timer.get(raw)
            if value is None:
                return False
            if not self._writer.cancel_one(raw, value):
                txn = self._writer.begin()
                txn.remove_stored([(raw, value)])
                txn.commit()
            return True

    def scan(self, *, from_ms: int | None = None, to_ms: int | None = None,
             topic: str | None = None, limit: int = 100, after: str | None = None) -> ScanPage:
        """Pending entries (in-flight ones included until completed) in key order. Examines at
        most max(1000, 10 x limit) keys; a page cut short that way still has ``next_after``."""
        start = scan_start(from_ms, after)
        if limit <= 0 or (to_ms is not None and to_ms < 0):
            return ScanPage([], None)
        examine_budget = max(SCAN_EXAMINE_MIN, 10 * limit)
        resume: bytes | None = None  # key to resume after when the page is cut short
        with self._lock:
            self._check_open()
            start = max(start, self._claims.persisted())  # nothing pending below the cursor
            read_opts = ReadOptions()
            if to_ms is not None:
                read_opts.set_iterate_upper_bound(K.due_prefix(to_ms + 1))
            it = self.db.timer.iter(read_opts)
            try:
                it.seek(start)
                entries, resume, corrupt = collect_pending(it, topic, limit, examine_budget)
            finally:
                del it
            self._counts.note_scan_skipped(corrupt)
        return ScanPage(entries, resume_handle(resume))

    def count_by_topic(self, max_entries: int = 0, page: int = 2_000
                       ) -> tuple[dict[str, int], bool]:
        """Pending keys per topic (in-flight ones included until completed), from the exact
        per-topic counters the key index keeps: O(topics), complete whatever ``max_entries``
        (nothing is walked; ``page``, the walk's old step, is accepted and unused)."""
        with self._lock:
            self._check_open()
            return self.key_index.topic_counts(), True

    def reconcile_from(self) -> int | None:
        """The CommitLog offset reconciled so far; None until the first complete/reconcile
        recorded one (the deliverer then skips reconciliation)."""
        with self._lock:
            self._check_open()
            return self._counts.reconcile_offset

    def reconcile(self, keys: Iterable[TimerKey], commitlog_end: int) -> int:
        raws = list(dict.fromkeys(K.encode_key(key) for key in keys))
        with self._lock:
            self._check_open()
            found = [(raw, old) for raw, old in zip(raws, self.db.timer.get(raws) if raws else [])
                     if old is not None]
            txn = self._writer.begin()
            txn.remove_stored(found)
            txn.reconcile = commitlog_end
            txn.commit()
            self._claims.forget(raws)
            return len(found)

    def next_due_ms(self) -> int | None:
        """Due time of the first pending key not in flight (a seek from the cursor)."""
        with self._lock:
            self._check_open()
            claims = self._claims
            it = self.db.timer.iter(ReadOptions())
            try:
                it.seek(claims.cursor)
                while it.valid() and it.key() in claims:
                    it.next()
                if it.valid():
                    return K.key_due_ms(it.key())
                check_iterator(it, f"timer store {self.path} next due")
                return None
            finally:
                del it

    def pending_count(self) -> int:
        with self._lock:
            self._check_open()
            return self._counts.pending

    def maintain(self, now_ms: int) -> None:
        """Starts a background tombstone reclaim when enough deletes piled up; in ``vlog``
        also syncs appended segments every flush interval (async mode), hints the kernel to
        read bodies due within ``vlog_prefetch_ms``, releases empty segments and starts a
        relocation of sparse ones. Cheap when there is nothing to do."""
        self._reclaimer.maybe_start()
        if self._housekeeping is not None:
            self._housekeeping.maintain(now_ms)

    def wait_for_maintenance(self, timeout_s: float = 120.0) -> None:
        """Wait for a background reclaim started by ``maintain`` (tests, benchmarks)."""
        self._reclaimer.worker.join(timeout_s)
        if self._housekeeping is not None:
            for worker in self._housekeeping.workers():
                worker.join(timeout_s)

    # -- by business key, reschedule, due counts -------------------------------------------
    def find(self, topic: str, key: str, *, limit: int = 100,
             after: str | None = None) -> ScanPage:
        with self._lock:
            self._check_open()
            return self.key_index.find(topic, key, limit, after)

    def cancel_by_key(self, topic: str, key: str, now_ms: int) -> KeyCancel:
        K.key_index_prefix(topic, key)  # InvalidMessageError before anything else
        with self._lock:
            self._check_open()
            return self._rescheduler.cancel_by_key(topic, key)

    def reschedule(self, handles: Sequence[str], due_ms: int, now_ms: int) -> list[Rescheduled]:
        targets = [(handle, _raw_of(handle)) for handle in handles]
        with self._append_fence, self._lock:  # it may append value bytes
            self._check_open()
            return self._rescheduler.reschedule(targets, due_ms, now_ms)

    def reschedule_by_key(self, topic: str, key: str, due_ms: int, now_ms: int
                          ) -> list[Rescheduled]:
        K.key_index_prefix(topic, key)
        with self._append_fence, self._lock:
            self._check_open()
            targets = self._rescheduler.targets_by_key(topic, key)
            return self._rescheduler.reschedule(targets, due_ms, now_ms)

    def count_due(self, ranges: Sequence[tuple[int | None, int | None]]) -> list[int]:
        with self._lock:
            self._check_open()
            return self.key_index.count_due(ranges)

    # -- engine extras ------------------------------------------------------------------------
    def reclaim_tombstones(self) -> dict[str, Any]:
        return self._reclaimer.reclaim()

    def compact(self) -> dict[str, Any]:
        """Full manual compaction of the timer column family (flushes first)."""
        before = self.db.timer_property_int("rocksdb.live-sst-files-size")
        started = time.monotonic()
        self._reclaimer.compact_all(
            lambda: self.flush_after_values((TIMER_CF,), wait=True))
        return {"before_live_sst_bytes": before,
                "after_live_sst_bytes": self.db.timer_property_int(
                    "rocksdb.live-sst-files-size"),
                "seconds": round(time.monotonic() - started, 3)}

    @classmethod
    def repair(cls, path: str | Path, config: BrokerConfig, *, data_dir_in_use: bool = False,
               rebuild: bool = False) -> "RepairReport":
        """``rtimer repair``: crash-safe, builds beside, rebuilds a vlog index from the value
        segments, names what it cannot recover (:mod:`rocks_timer.timer.rocksdb.recovery`).
        The store must not be open anywhere."""
        from rocks_timer.timer.rocksdb.recovery import StoreRepair
        return StoreRepair(cls, Path(path), config, data_dir_in_use, rebuild).run()

    def load_rebuilt(self, entries: Iterable[tuple[bytes, bytes]] | dict[bytes, bytes],
                     segment_rows: dict[int, bytes], next_id: int | None, cursor: bytes,
                     counters: dict[bytes, bytes] | None = None) -> None:
        """Repair only: fill this new, empty store with an index rebuilt elsewhere (index
        values, liveness rows, the next segment id, the salvaged cursor, the vlog's counters).
        The pending count follows the entries; the reconcile offset restarts at 0, so the next
        open drops every key whose stamped copy is in the CommitLog; the key index and the due
        and topic counters are built by the next open (their marker is removed). Synced before
        it returns."""
        from rocksdict import WriteBatch
        db = self.db
        with self._lock:
            self._check_open()
            batch, n = WriteBatch(raw_mode=True), 0
            pairs = entries.items() if isinstance(entries, dict) else entries
            for key, value in pairs:
                batch.put(key, value, db.timer_h)
                n += 1
                if n % 50_000 == 0:
                    db.write_unsynced(batch)
                    batch = WriteBatch(raw_mode=True)
            for seg_id, row in segment_rows.items():
                batch.put(K.segment_meta_key(seg_id), row, db.meta_h)
            if next_id is not None:
                batch.put(K.META_VLOG_NEXT_ID, pack_u64(next_id), db.meta_h)
            for name, value in (counters or {}).items():  # figures (stats), carried over
                batch.put(name, value, db.meta_h)
            batch.put(K.META_PENDING, pack_u64(n), db.meta_h)
            batch.put(K.META_CURSOR, cursor, db.meta_h)
            batch.put(K.META_RECONCILE_OFFSET, pack_u64(0), db.meta_h)
            batch.delete(K.META_KEY_INDEX, db.meta_h)
            db.write_synced(batch)
            db.flush((TIMER_CF, META_CF, CORRUPT_CF), wait=True)

    def relocate(self, now_ms: int) -> dict[str, Any]:
        """vlog: relocate sparse or old segments now and release empty ones ({} for inline)."""
        if self._vlog is None:
            return {}
        return gc.relocate(self._vlog, self._segment_index, self.config, now_ms)

    def drop_caches(self) -> None:
        """vlog: evict the value segments from the page cache (cold-backlog benchmarks)."""
        if self._vlog is not None:
            with self._lock:
                self._vlog.drop_caches()

    def sync(self) -> None:
        """Make every write so far survive power loss (async mode's periodic flush)."""
        self.sync_values_then_wal()

    def sync_values_then_wal(self) -> None:
        """The value segments appended to, then the RocksDB WAL: every index entry the WAL
        sync makes durable points at bytes already durable (the vlog crash order; the release
        of empty segments syncs through here too). The bulk of the bytes is synced while sends
        go on; then sends wait (``_append_fence``) while what they appended meanwhile and the
        WAL are synced, so no entry written after the first round reaches the synced WAL ahead
        of its bytes. Claims and completions go on throughout: they append no value bytes."""
        self._sync_dirty()  # outside the locks: sends go on meanwhile
        with self._sync_lock:  # RocksDB orders the WAL's sync with writes; close waits for it
            if self._closed:
                return
            with self._append_fence:
                self._sync_dirty()
                self.db.flush_wal()

    def _sync_dirty(self) -> None:
        """fdatasync the segments appended to so far, and those the background sync holds."""
        with self._lock:
            self._check_open()
            dirty = self._vlog.take_dirty() if self._vlog is not None else []
        if self._housekeeping is not None:  # and what the background sync has not done yet
            dirty += self._housekeeping.syncer.take()
        sync_segments(dirty)

    def flush(self) -> None:
        """Flush every column family's memtable to an SST (after the value bytes, below)."""
        self.flush_after_values((TIMER_CF, META_CF, CORRUPT_CF), wait=True)

    def _flush_meta(self) -> None:
        self.flush_after_values((META_CF,), wait=False)

    def flush_after_values(self, families: Sequence[str], wait: bool) -> None:
        """Flush the memtables of ``families`` once the value bytes their entries point at are
        durable: a flushed memtable is durable like a synced WAL, so it keeps the same order
        (``sync_values_then_wal``; the liveness rows' ``end`` in ``meta`` included)."""
        self._sync_dirty()
        with self._sync_lock:
            if self._closed:
                return
            with self._append_fence:
                self._sync_dirty()
                with self._lock:
                    self._check_open()
                    self.db.flush(families, wait)

    def wait_for_compactions(self, quiet_ms: int = 500, timeout_ms: int = 120_000) -> bool:
        return maint.wait_for_compactions(self.db, self._lock, self._check_open, quiet_ms,
                                          timeout_ms)

    def tickers(self) -> dict[str, int]:
        """All RocksDB statistics tickers of this store's DB (cumulative since open)."""
        return self.db.tickers()

    def statistics(self) -> str | None:
        """RocksDB's statistics dump (tickers and histograms since open; benchmarks)."""
        return self.db.statistics()

    def stats(self) -> StoreStats:
        counts = self.db.tickers()
        with self._lock:
            self._check_open()
            cursor = self._claims.persisted()
            extra: dict[str, Any] = {
                "profile": self.profile,
                "index_compaction": self.index_compaction,
                "meta_compaction": self.meta_compaction,
                "in_flight": len(self._claims),
                "cursor_due_ms": K.key_due_ms(cursor) if cursor else None,
                "corrupt": self._counts.corrupt,
                "scan_corrupt_skipped": self._counts.scan_skipped,
                "deletes_since_reclaim": self._counts.deletes,
                "reconcile_offset": self._counts.reconcile_offset,
                "reclaim_failures": self._failures.count,
            }
            extra.update(maint.db_figures(self.db))
            pending = self._counts.pending
            extra["layout"] = self.layout
            if self._vlog is not None:
                extra.update(self._vlog.figures())
            if self._housekeeping is not None:
                extra["vlog_sync_failures"] = self._housekeeping.syncer.failures
        return maint.store_stats(counts, pending, extra)

    def check(self) -> dict[str, int]:
        with self._lock:
            self._check_open()
            return maint.check(self.db, self._claims, self._counts, self.key_index,
                               self._vlog, self.path)

    # -- set-aside messages (rocks_timer.timer.rocksdb.setaside) ---------------------------------
    def set_aside(self) -> list[setaside.Examined]:
        """Every set-aside (quarantined) message, named and read as far as it can be."""
        with self._lock:
            self._check_open()
            rows = setaside.read_rows(self.db.corrupt)
        return setaside.examine_rows(rows, self.path / "vlog" if self._vlog is not None
                                     else None)

    def restore_set_aside(self, msg_ids: Sequence[str] | None, now_ms: int) -> dict[str, Any]:
        """Put back the chosen set-aside messages that decode now (all when ``msg_ids`` is
        None); the others are refused with the reason."""
        return setaside.restore(self.set_aside(), msg_ids, self.schedule, now_ms)
