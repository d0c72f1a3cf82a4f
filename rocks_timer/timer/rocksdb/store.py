"""``RocksTimerStore``: the RocksDB timer engine (RIP-43 option B), on rocksdict in raw mode.

Column families: ``timer`` (the index: key = due + topic + msg id, value = the encoded message in
the ``inline`` layout, a pointer into a value segment in the ``vlog`` layout, see ``index``),
``meta`` (format settings, persisted cursor, reconcile offset, exact counters, the value
segments' liveness rows) and ``corrupt`` (values that failed to decode or whose segment record is
damaged, kept byte for byte under their key).

Layouts (DESIGN §6b): the layout is a format setting in ``meta``. Everything below holds for both;
in ``vlog`` every change of the index also changes the liveness rows of the segments it points
into, in the same WriteBatch (``ValueLog.stage``), and ``_in_flight`` remembers each claimed
key's pointer so completing it releases its bytes.

Concurrency: one lock (``_lock``) covers every read-modify-write: the in-flight set, the claim
cursor, the counters and each WriteBatch. Claims, cancels and schedules therefore see one order:
a cancel that returns True happened before any claim of the key, and a schedule's clamp is
decided against the same cursor the claim advances (rocksdict holds the GIL for writes and
iteration anyway, so the lock costs no parallelism).

Cursor: claims walk keys in order from the claim cursor (the successor of the last claimed key),
so the claimed-key order is increasing and ``_in_flight`` (an insertion-ordered dict) is sorted.
The persisted cursor is the smallest key not yet completed: the first in-flight key, else the
claim cursor. No key ever lands below the claim cursor: ``schedule`` raises a key's due time to at
least the low watermark (due of the claim cursor + 1). So every key below the cursor is gone for
good, which makes ``delete_range`` below it safe and lets scans start there instead of
wading through tombstones.

Pending counter: exact, persisted in ``meta`` in the same WriteBatch as every change of the
``timer`` column family (schedule checks which keys are new with one multi-get).
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from rocksdict import Options, Rdict, ReadOptions, WriteBatch, WriteOptions

from rocks_timer.config import BrokerConfig
from rocks_timer.errors import InvalidHandleError, InvalidMessageError, StoreClosedError
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import claim, complete, keyindex, layout
from rocks_timer.timer.rocksdb.reschedule import KeyedRocksOps
from rocks_timer.timer.rocksdb import maint as rocks_maint, meta as rocks_meta
from rocks_timer.timer.rocksdb import reclaim, setaside
from rocks_timer.timer.rocksdb.vlog import ValueLog
from rocks_timer.timer.handles import decode_handle
from rocks_timer.timer.rocksdb import opening
if TYPE_CHECKING:
    from rocks_timer.timer.rocksdb.recovery import RepairReport
from rocks_timer.timer.rocksdb.opening import CORRUPT_CF, META_CF, TIMER_CF
from rocks_timer.timer.rocksdb.syncer import BackgroundSync, sync_segments
from rocks_timer.timer.rocksdb.scan import (check_iterator, collect_pending, count_topics_page,
                                            resume_handle, scan_start)
from rocks_timer.timer.rocksdb.duecount import DueCounters
from rocks_timer.timer.rocksdb.keyindex import IndexChanges
from rocks_timer.timer.store import (Compacting, DueRecord, ScanPage, Scheduled, StoreStats,
                                     TimerKey, TimerRecord, TimerStore, new_scheduled)
from rocks_timer.timer.schedule_codec import encode_schedule

log = logging.getLogger(__name__)

RECLAIM_AFTER_DELETES = 100_000
SCAN_EXAMINE_MIN = 1_000
class RocksTimerStore(KeyedRocksOps, TimerStore, Compacting):
    """Owns one RocksDB directory holding pending timer messages, the delivery cursor, the
    reconcile checkpoint and the quarantine of corrupt values (find / cancel / reschedule by
    key and the due counts come from ``KeyedRocksOps``)."""

    name = "rocksdb"
    exactly_once = True
    forgets_on_complete = True  # complete() deletes keys: the deliverer syncs the CommitLog first

    def __init__(self, path: Path, config: BrokerConfig, db: Rdict, db_options: Options,
                 state: rocks_meta.StoredState, reclaim_after_deletes: int) -> None:
        """Use :meth:`open`."""
        self.path = path
        self.config = config
        self.profile = config.rocksdb_profile
        self.reclaim_after_deletes = reclaim_after_deletes
        self._reclaimer: threading.Thread | None = None
        self._reclaim_failures = 0
        self._db: Rdict | None = db
        self._db_options = db_options  # owns the statistics tickers of this DB
        self._timer = db.get_column_family(TIMER_CF)
        self._meta = db.get_column_family(META_CF)
        self._corrupt = db.get_column_family(CORRUPT_CF)
        self._timer_h = db.get_column_family_handle(TIMER_CF)
        self._meta_h = db.get_column_family_handle(META_CF)
        self._corrupt_h = db.get_column_family_handle(CORRUPT_CF)
        self._keys, self._keys_h = self._meta, self._meta_h  # the key index lives in meta
        self._due = DueCounters(self._meta, self._meta_h)
        self._keyed = False  # True once the key index may hold entries
        self._write_opts = WriteOptions()
        # DESIGN §5: in sync mode a send returns once its batch is on disk
        self._write_opts.sync = config.rocksdb_sync or config.flush_disk_type == "sync"
        self._lock = threading.Lock()
        self._maint_lock = threading.Lock()  # compaction runs outside _lock; close waits for it
        self._sync_lock = threading.Lock()  # so does the WAL sync of ``sync``: sends go on
        # held by every write that appends value bytes (taken before ``_lock``) and by the WAL
        # sync of ``sync_values_then_wal``: no index entry reaches a synced WAL before the bytes
        # it points at are synced (DESIGN §6b crash order), while claims and completions go on
        self._append_fence = threading.Lock()
        self._closed = False
        # claimed key -> its index value in vlog (a pointer's bytes are released when it
        # completes; an inline value is skipped), None in the inline layout
        self._in_flight: dict[bytes, bytes | None] = {}
        self.layout = state.layout
        self.index_compaction = state.index_compaction
        self.meta_compaction = state.meta_compaction
        self.vlog: ValueLog | None = None
        if self.layout == "vlog":
            self.vlog = ValueLog(path / "vlog", config, self._meta, self._meta_h)
        if self.vlog is not None and self.vlog.voided:  # the void records' rows (vlog.py)
            batch = WriteBatch(raw_mode=True)
            new = self.vlog.stage({seg_id: (0, 0) for seg_id in self.vlog.voided}, batch)
            self._db.write(batch, self._write_opts)
            self.vlog.commit(new)
        self._relocator: threading.Thread | None = None
        self._releaser: threading.Thread | None = None
        self._meta_flusher: threading.Thread | None = None
        self._last_sync_ms = 0
        self._cursor_written_ms = 0  # vlog/cursor (reclaim.maintain_vlog)
        self._syncer = BackgroundSync(f"vlog-sync {path.name}") if self.layout == "vlog" else None
        self._prefetched_to = b""
        self._meta_flushed_at = 0
        self._claim_cursor: bytes = state.cursor
        self._pending = state.pending
        self._corrupt_count = state.corrupt
        self._reconcile_offset = state.reconcile_offset
        self._deletes_since_reclaim = 0
        self._backlog = False  # the last claim filled its budget (maint.maybe_start_reclaim)
        self._reclaimed_below = b""
        self._scan_corrupt_skipped = 0

    # -- open / close -------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path, config: BrokerConfig, *,
             reclaim_after_deletes: int = RECLAIM_AFTER_DELETES) -> "RocksTimerStore":
        """Open (or create) the store at ``path``; ConfigError on a format mismatch or unknown
        profile, StoreLockedError when another process or open store holds it
        (:mod:`rocks_timer.timer.rocksdb.opening`)."""
        return opening.open_store(cls, Path(path), config, reclaim_after_deletes)

    def close(self) -> None:
        """Flush and release the DB (idempotent). Handles are dropped first: a live column
        family handle or iterator would keep the RocksDB LOCK held after close."""
        for thread in (self._relocator, self._releaser, self._meta_flusher):
            if thread is not None:
                thread.join()
        if self._syncer is not None:
            self._syncer.close()
        with self._sync_lock, self._maint_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            if self.vlog is not None:
                self.vlog.write_cursor(self._cursor())
                self.vlog.close()
            db = self._db
            self._due.close()
            self._timer = self._meta = self._corrupt = self._keys = None
            self._timer_h = self._meta_h = self._corrupt_h = self._keys_h = None
            self._db = None
            self._in_flight.clear()
            db.close()
            del db

    def __enter__(self) -> "RocksTimerStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"timer store {self.path} is closed")

    # -- cursor helpers (call with _lock held) ------------------------------------------------
    def _low_watermark_ms(self) -> int:
        """Smallest due time whose every key sorts at or after the claim cursor."""
        cursor = self._claim_cursor
        if not cursor:
            return 0
        due_ms = K.key_due_ms(cursor)
        return due_ms if len(cursor) == K.DUE_SIZE else due_ms + 1

    def _cursor(self, without: Iterable[bytes] = ()) -> bytes:
        """Smallest key not yet completed, ignoring in-flight keys in ``without``."""
        skip = without if isinstance(without, (set, frozenset, dict)) else set(without)
        for key in self._in_flight:  # sorted: claims happen in increasing key order
            if key not in skip:
                return key
        return self._claim_cursor

    def _write(self, batch: WriteBatch) -> None:
        self._db.write(batch, self._write_opts)

    def _stage_removed(self, index_values: Iterable[bytes | None], batch: WriteBatch,
                       lost: bool = False, delivered: bool = False) -> dict | None:
        return layout.stage_removed(self, index_values, batch, lost, delivered)

    def _commit_removed(self, new: dict | None) -> None:
        layout.commit_removed(self, new)

    # -- TimerStore ---------------------------------------------------------------------------
    def schedule(self, records: Sequence[TimerRecord], now_ms: int, *,
                 retire: Sequence[tuple[bytes, bytes]] = (),
                 retire_index_entries: Sequence[bytes] = ()) -> list[Scheduled]:
        """Store ``records``; ``retire``: set-aside rows (key, index value) these records put
        back, removed in the same batch with the liveness they held (``setaside.restore``)."""
        if type(records) is not list:
            records = list(records)
        if not records:
            return []
        with self._append_fence, self._lock:
            self._check_open()
            raw_keys, values, key_dues, handles = encode_schedule(
                records, self._low_watermark_ms(), self.config.timer_compress_threshold)
            if not retire and len(raw_keys) == 1 and self.vlog is not None and \
                    layout.schedule_one_vlog(self, records[0].message, raw_keys[0], values[0],
                                             key_dues[0], now_ms):
                return [Scheduled(handles[0], key_dues[0])]
            batch = WriteBatch(raw_mode=True)
            corrupt_count = setaside.retire_rows(self, batch, [raw for raw, _ in retire],
                                                 list(retire_index_entries)) \
                if retire else self._corrupt_count
            olds = self._old_values(raw_keys)
            changes, added = keyindex.schedule_changes(self, raw_keys, records, olds, key_dues)
            if self.vlog is not None:
                fields = [(m.queue_id, len(m.body), m.tags)
                          for m in [r.message for r in records]]
                layout.schedule_vlog(self, raw_keys, values, now_ms, batch, fields, olds,
                                     changes, added, key_dues,
                                     drop=[value for _, value in retire])
                self._corrupt_count = corrupt_count
                return list(map(new_scheduled, zip(handles, key_dues)))
            put, timer_h = batch.put, self._timer_h
            for raw, value in zip(raw_keys, values):
                put(raw, value, timer_h)
            if added:
                put(K.META_PENDING, rocks_meta.pack_u64(self._pending + added), self._meta_h)
            new_counts = keyindex.stage(self, changes, batch)
            self._db.write(batch, self._write_opts)
            keyindex.commit(self, changes, new_counts)
            self._pending += added
            self._corrupt_count = corrupt_count
        return list(map(new_scheduled, zip(handles, key_dues)))

    def _old_values(self, raw_keys: list[bytes]) -> dict[bytes, bytes | None]:
        """The stored value of each distinct key of a schedule batch (None: a new key), so
        the pending count stays exact (a producer's retry of the same key adds nothing)."""
        if len(raw_keys) == 1:  # a single send: a point get is half a one-key multi-get
            return {raw_keys[0]: self._timer.get(raw_keys[0])}
        distinct = list(dict.fromkeys(raw_keys))  # a batch may repeat a key
        return dict(zip(distinct, self._timer.get(distinct)))

    def claim_due(self, now_ms: int, max_messages: int, max_bytes: int) -> list[DueRecord]:
        return claim.claim_due(self, now_ms, max_messages, max_bytes)

    def complete(self, records: Sequence[DueRecord], commitlog_end: int | None) -> None:
        complete.complete(self, records, commitlog_end)

    def cancel(self, handle: str, now_ms: int) -> bool:
        parsed = decode_handle(handle)
        try:
            raw = K.encode_key(TimerKey(parsed.due_ms, parsed.topic, parsed.msg_id))
        except InvalidMessageError as exc:
            raise InvalidHandleError(f"handle {handle!r} names no possible key: {exc}") from None
        with self._lock:
            self._check_open()
            value = None if raw in self._in_flight else self._timer.get(raw)
            if value is None:
                return False
            self._remove_stored([(raw, value)])
            return True

    def _remove_stored(self, found: list[tuple[bytes, bytes]],
                       meta: Iterable[tuple[bytes, bytes]] = ()) -> None:
        """Delete stored keys (key, its index value) in one batch with everything that counts
        them: the pending count, value-segment liveness, the key index and the due counters,
        and ``meta`` rows the caller adds. The caller holds the lock."""
        batch = WriteBatch(raw_mode=True)
        changes = IndexChanges()
        for raw, value in found:
            batch.delete(raw, self._timer_h)
            changes.removed(raw, keyindex.stored_keys(self, raw, value))
        pending = self._pending - len(found)
        batch.put(K.META_PENDING, rocks_meta.pack_u64(pending), self._meta_h)
        for name, row in meta:
            batch.put(name, row, self._meta_h)
        new = self._stage_removed([value for _, value in found], batch)
        new_counts = keyindex.stage(self, changes, batch)
        self._write(batch)
        self._commit_removed(new)
        keyindex.commit(self, changes, new_counts)
        self._pending = pending
        self._deletes_since_reclaim += len(found)

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
            start = max(start, self._cursor())  # nothing pending below the cursor
            read_opts = ReadOptions()
            if to_ms is not None:
                read_opts.set_iterate_upper_bound(K.due_prefix(to_ms + 1))
            it = self._timer.iter(read_opts)
            try:
                it.seek(start)
                entries, resume, corrupt = collect_pending(it, topic, limit, examine_budget)
            finally:
                del it
            self._scan_corrupt_skipped += corrupt
        return ScanPage(entries, resume_handle(resume))

    def count_by_topic(self, max_keys: int, page: int = 2_000) -> tuple[dict[str, int], bool]:
        """Pending keys per topic, walking keys only (no value read into Python), ``page`` keys
        per hold of the store's lock so sends and deliveries interleave; at most ``max_keys``
        (False, and the counts so far, past that). Exact when nothing changes meanwhile."""
        counts: dict[bytes, int] = {}
        start: bytes | None = None
        walked, complete = 0, True
        while True:
            budget = min(page, max_keys - walked)
            if budget <= 0:
                complete = False
                break
            with self._lock:
                self._check_open()
                begin = self._cursor() if start is None else max(start, self._cursor())
                it = self._timer.iter(ReadOptions())
                try:
                    it.seek(begin)
                    last = count_topics_page(it, counts, budget)
                finally:
                    del it
            walked += budget
            if last is None:
                break
            start = K.key_successor(last)
        named = {}
        for raw, n in counts.items():
            name = raw.decode("utf-8", "replace")
            named[name] = named.get(name, 0) + n
        return dict(sorted(named.items())), complete

    def reconcile_from(self) -> int | None:
        """The CommitLog offset reconciled so far; None until the first complete/reconcile
        recorded one (the deliverer then skips reconciliation)."""
        with self._lock:
            self._check_open()
            return self._reconcile_offset

    def reconcile(self, keys: Iterable[TimerKey], commitlog_end: int) -> int:
        raws = list(dict.fromkeys(K.encode_key(key) for key in keys))
        with self._lock:
            self._check_open()
            found = [(raw, old) for raw, old in zip(raws, self._timer.get(raws) if raws else [])
                     if old is not None]
            self._remove_stored(found, [(K.META_RECONCILE_OFFSET,
                                         rocks_meta.pack_u64(commitlog_end))])
            self._reconcile_offset = commitlog_end
            for raw in raws:
                self._in_flight.pop(raw, None)
            return len(found)

    def next_due_ms(self) -> int | None:
        """Due time of the first pending key not in flight (a seek from the cursor)."""
        with self._lock:
            self._check_open()
            it = self._timer.iter(ReadOptions())
            try:
                it.seek(self._claim_cursor)
                while it.valid() and it.key() in self._in_flight:
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
            return self._pending

    def maintain(self, now_ms: int) -> None:
        """Starts a background tombstone reclaim when enough deletes piled up; in ``vlog``
        also syncs appended segments every flush interval (async mode), hints the kernel to
        read bodies due within ``vlog_prefetch_ms``, releases empty segments and starts a
        relocation of sparse ones. Cheap when there is nothing to do."""
        rocks_maint.maybe_start_reclaim(self)
        if self.vlog is not None:
            reclaim.maintain_vlog(self, now_ms)

    def wait_for_maintenance(self, timeout_s: float = 120.0) -> None:
        """Wait for a background reclaim started by ``maintain`` (tests, benchmarks)."""
        if self._reclaimer is not None:
            self._reclaimer.join(timeout_s)
        for thread in (self._relocator, self._releaser, self._meta_flusher):
            if thread is not None:
                thread.join(timeout_s)

    # -- engine extras ------------------------------------------------------------------------
    def reclaim_tombstones(self) -> dict[str, Any]:
        return rocks_maint.reclaim_tombstones(self)

    def compact(self) -> dict[str, Any]:
        return rocks_maint.compact(self)

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
        open drops every key whose stamped copy is in the CommitLog; the key index and due
        counters are built by the next open (their marker is removed). Synced before it
        returns."""
        with self._lock:
            self._check_open()
            batch, n = WriteBatch(raw_mode=True), 0
            pairs = entries.items() if isinstance(entries, dict) else entries
            for key, value in pairs:
                batch.put(key, value, self._timer_h)
                n += 1
                if n % 50_000 == 0:
                    self._db.write(batch)
                    batch = WriteBatch(raw_mode=True)
            for seg_id, row in segment_rows.items():
                batch.put(K.segment_meta_key(seg_id), row, self._meta_h)
            if next_id is not None:
                batch.put(K.META_VLOG_NEXT_ID, rocks_meta.pack_u64(next_id), self._meta_h)
            for name, value in (counters or {}).items():  # figures (stats), carried over
                batch.put(name, value, self._meta_h)
            self._finish_rebuilt(batch, n, cursor)

    def _finish_rebuilt(self, batch: WriteBatch, pending: int, cursor: bytes) -> None:
        batch.put(K.META_PENDING, rocks_meta.pack_u64(pending), self._meta_h)
        batch.put(K.META_CURSOR, cursor, self._meta_h)
        batch.put(K.META_RECONCILE_OFFSET, rocks_meta.pack_u64(0), self._meta_h)
        batch.delete(K.META_KEY_INDEX, self._meta_h)
        sync = WriteOptions()
        sync.sync = True
        self._db.write(batch, sync)
        for family in (self._timer, self._meta, self._corrupt):
            family.flush(True)

    def relocate(self, now_ms: int) -> dict[str, Any]:
        """vlog: relocate sparse or old segments now and release empty ones ({} for inline)."""
        return reclaim.relocate(self, now_ms) if self.vlog is not None else {}

    def drop_caches(self) -> None:
        """vlog: evict the value segments from the page cache (cold-backlog benchmarks)."""
        if self.vlog is not None:
            with self._lock:
                self.vlog.drop_caches()

    def sync(self) -> None:
        """Make every write so far survive power loss (async mode's periodic flush)."""
        self.sync_values_then_wal()

    def sync_values_then_wal(self) -> None:
        """The value segments appended to, then the RocksDB WAL: every index entry the WAL
        sync makes durable points at bytes already durable (DESIGN §6b crash order; the release
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
                self._db.flush_wal(True)

    def _sync_dirty(self) -> None:
        """fdatasync the segments appended to so far, and those the background sync holds."""
        with self._lock:
            self._check_open()
            dirty = self.vlog.take_dirty() if self.vlog is not None else []
        if self._syncer is not None:  # and what the background sync has not done yet
            dirty += self._syncer.take()
        sync_segments(dirty)

    def flush(self) -> None:
        """Flush every column family's memtable to an SST (after the value bytes, below)."""
        self.flush_after_values((TIMER_CF, META_CF, CORRUPT_CF), wait=True)

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
                    for name in families:
                        self._db.get_column_family(name).flush(wait)

    def wait_for_compactions(self, quiet_ms: int = 500, timeout_ms: int = 120_000) -> bool:
        return rocks_maint.wait_for_compactions(self, quiet_ms, timeout_ms)

    def tickers(self) -> dict[str, int]:
        return rocks_maint.tickers(self)

    def statistics(self) -> str:
        """RocksDB's statistics dump of this DB as text (tickers and histograms)."""
        return self._db_options.get_statistics()

    def stats(self) -> StoreStats:
        return rocks_maint.stats(self)

    def check(self) -> dict[str, int]:
        return rocks_maint.check(self)

    # -- set-aside messages (rocks_timer.timer.rocksdb.setaside) ---------------------------------
    def set_aside(self) -> list[setaside.Examined]:
        """Every set-aside (quarantined) message, named and read as far as it can be."""
        return setaside.examine_live(self)

    def restore_set_aside(self, msg_ids: Sequence[str] | None, now_ms: int) -> dict[str, Any]:
        """Put back the chosen set-aside messages that decode now (all when ``msg_ids`` is
        None); the others are refused with the reason."""
        return setaside.restore(self, msg_ids, now_ms)
