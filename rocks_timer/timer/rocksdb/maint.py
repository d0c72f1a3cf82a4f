"""Maintenance and figures of ``RocksTimerStore``: tombstone reclaim, manual compaction,
statistics, the invariant check, and a wait for background work (benchmarks).

Kept apart from :mod:`rocks_timer.timer.rocksdb.store` so the store module holds only the
``TimerStore`` operations; these functions take the store and use its lock the same way.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from rocksdict import BottommostLevelCompaction, CompactOptions, WriteBatch

from rocks_timer.errors import CorruptRecordError, StoreClosedError
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb import keyindex
from rocks_timer.timer.rocksdb.opening import TIMER_CF
from rocks_timer.timer.rocksdb.scan import check_iterator
from rocks_timer.timer.rocksdb.profiles import parse_tickers
from rocks_timer.timer.store import StoreStats
from rocks_timer.timer.values import decode_value

if TYPE_CHECKING:
    from rocks_timer.timer.rocksdb.store import RocksTimerStore

log = logging.getLogger(__name__)

CF_INT_PROPERTIES = {
    "live_sst_bytes": "rocksdb.live-sst-files-size",
    "total_sst_bytes": "rocksdb.total-sst-files-size",
    "live_blob_bytes": "rocksdb.live-blob-file-size",
    "live_keys_estimate": "rocksdb.estimate-num-keys",
    "live_data_estimate_bytes": "rocksdb.estimate-live-data-size",
    "memtable_bytes": "rocksdb.cur-size-all-mem-tables",
    "memtable_deletes": "rocksdb.num-deletes-active-mem-table",
    "l0_files": "rocksdb.num-files-at-level0",
    "pending_compaction_bytes": "rocksdb.estimate-pending-compaction-bytes",
}
TICKERS_IN_EXTRA = {
    "compact_read_bytes": "rocksdb.compact.read.bytes",
    "compact_write_bytes": "rocksdb.compact.write.bytes",
    "keys_written": "rocksdb.number.keys.written",
    "iter_skipped_internal_keys": "rocksdb.number.iter.skip",
    "stall_micros": "rocksdb.stall.micros",
    "wal_synced": "rocksdb.wal.synced",
}


BACKLOG_RECLAIM_FACTOR = 10  # see maybe_start_reclaim


def _force_bottommost() -> CompactOptions:
    opts = CompactOptions()
    opts.set_bottommost_level_compaction(BottommostLevelCompaction.force_optimized())
    return opts


def maybe_start_reclaim(store: "RocksTimerStore") -> None:
    """Start a reclaim on a background thread once enough deletes piled up (or a drained store
    has some): the forced compaction can take seconds and must not stall deliveries.

    While a backlog drains (the last claim filled its budget) the reclaim waits, up to ten
    times the usual number of deletes: claims seek from the cursor, so the tombstones below it
    cost them nothing, and an inline store's forced compaction would rewrite the keys not yet
    delivered on every round (a million due at once: ten rounds, 5 s of compaction CPU beside
    a 7 s drain, measured in docs/BENCHMARKS.md)."""
    deletes = store._deletes_since_reclaim
    every = store.reclaim_after_deletes
    if store._backlog and deletes < BACKLOG_RECLAIM_FACTOR * every:
        return
    due = deletes >= every or (store._pending == 0 and deletes >= every // 10)
    if due and not running(store._reclaimer):
        in_background(store, "_reclaimer", "rocks-reclaim", "tombstone reclaim",
                      reclaim_tombstones)


def running(thread: threading.Thread | None) -> bool:
    return thread is not None and thread.is_alive()


def in_background(store: "RocksTimerStore", attr: str, name: str, what: str,
                  work: Callable[..., Any], *args: Any) -> None:
    """Run ``work(store, *args)`` on a daemon thread kept in ``store.<attr>`` (closing the
    store joins it). A store closed meanwhile ends it quietly; any other failure is counted
    (``reclaim_failures`` in stats) and logged, and the next ``maintain`` tries again."""
    thread = threading.Thread(target=_quietly, args=(store, what, work, args), name=name,
                              daemon=True)
    setattr(store, attr, thread)
    thread.start()


def _quietly(store: "RocksTimerStore", what: str, work: Callable[..., Any], args: tuple) -> None:
    try:
        work(store, *args)
    except StoreClosedError:
        pass
    except Exception:  # noqa: BLE001 - counted and logged; the next maintain retries
        store._reclaim_failures += 1
        log.exception("timer store %s: %s failed", store.path, what)


def reclaim_tombstones(store: "RocksTimerStore") -> dict[str, Any]:
    """Range-delete and compact everything below the cursor (no key can land there again),
    so the point tombstones of delivered keys stop costing reads and space."""
    with store._maint_lock:
        with store._lock:
            store._check_open()
            cursor = store._cursor()
            deletes = store._deletes_since_reclaim
            store._deletes_since_reclaim = 0
            if not cursor or cursor <= store._reclaimed_below:
                return {"reclaimed": False, "deletes": deletes}
            batch = WriteBatch(raw_mode=True)
            batch.delete_range(b"", cursor, store._timer_h)
            store._write(batch)
        # outside _lock: claims and sends go on; the range below the cursor is frozen.
        # inline: the deleted bodies hold disk until compaction drops them, so compact now.
        # vlog: the index is small and scans start at the cursor; a forced compaction would
        # rewrite every index SST (keys arrive in random due order, so each SST spans the
        # whole key range) for little space: the range tombstone is left to normal compaction.
        if store.vlog is None:
            store._timer.compact_range(None, cursor, _force_bottommost())
        store._reclaimed_below = cursor
        return {"reclaimed": True, "deletes": deletes, "below_due_ms": K.key_due_ms(cursor)}


def compact(store: "RocksTimerStore") -> dict[str, Any]:
    """Full manual compaction of the timer column family (flushes first)."""
    with store._maint_lock:
        with store._lock:
            store._check_open()
        before = _cf_int(store, "rocksdb.live-sst-files-size")
        started = time.monotonic()
        store.flush_after_values((TIMER_CF,), wait=True)
        store._timer.compact_range(None, None, _force_bottommost())
        return {"before_live_sst_bytes": before,
                "after_live_sst_bytes": _cf_int(store, "rocksdb.live-sst-files-size"),
                "seconds": round(time.monotonic() - started, 3)}


def wait_for_compactions(store: "RocksTimerStore", quiet_ms: int, timeout_ms: int) -> bool:
    """Poll until no flush or compaction has run for ``quiet_ms`` (wall time: a benchmark aid,
    not engine logic). ``compaction-pending`` is not used: it can stick at 1 under universal."""
    deadline = time.monotonic() + timeout_ms / 1000
    quiet_since = None
    while time.monotonic() < deadline:
        with store._lock:
            store._check_open()
            running = sum(store._db.property_int_value(name) or 0 for name in (
                "rocksdb.num-running-compactions", "rocksdb.num-running-flushes"))
        now = time.monotonic()
        if running:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif (now - quiet_since) * 1000 >= quiet_ms:
            return True
        time.sleep(0.02)
    return False


def tickers(store: "RocksTimerStore") -> dict[str, int]:
    """All RocksDB statistics tickers of this store's DB (cumulative since open)."""
    return parse_tickers(store._db_options.get_statistics())


def _cf_int(store: "RocksTimerStore", name: str) -> int:
    try:
        return store._timer.property_int_value(name) or 0
    except Exception:  # a property this RocksDB build reports as text or not at all
        return 0


def stats(store: "RocksTimerStore") -> StoreStats:
    counts = tickers(store)
    with store._lock:
        store._check_open()
        cursor = store._cursor()
        extra: dict[str, Any] = {
            "profile": store.profile,
            "index_compaction": store.index_compaction,
            "meta_compaction": store.meta_compaction,
            "in_flight": len(store._in_flight),
            "cursor_due_ms": K.key_due_ms(cursor) if cursor else None,
            "corrupt": store._corrupt_count,
            "scan_corrupt_skipped": store._scan_corrupt_skipped,
            "deletes_since_reclaim": store._deletes_since_reclaim,
            "reconcile_offset": store._reconcile_offset,
        }
        for label, prop in CF_INT_PROPERTIES.items():
            extra[label] = _cf_int(store, prop)
        for label in ("num-running-compactions", "num-running-flushes"):
            extra[label.replace("-", "_")] = store._db.property_int_value(f"rocksdb.{label}") or 0
        pending = store._pending
        extra["layout"] = store.layout
        vlog_figures = store.vlog.figures() if store.vlog is not None else {}
        extra.update(vlog_figures)
        if store._syncer is not None:
            extra["vlog_sync_failures"] = store._syncer.failures
    for label, ticker in TICKERS_IN_EXTRA.items():
        extra[label] = counts.get(ticker, 0)
    return StoreStats(
        engine="rocksdb", pending=pending,
        bytes_written={"wal": counts.get("rocksdb.wal.bytes", 0),
                       "flush": counts.get("rocksdb.flush.write.bytes", 0),
                       "compaction": counts.get("rocksdb.compact.write.bytes", 0),
                       "user": counts.get("rocksdb.bytes.written", 0),
                       "vlog": vlog_figures.get("vlog_appended_bytes", 0),
                       "vlog_relocation": vlog_figures.get("vlog_relocated_bytes", 0)},
        extra=extra)


def check(store: "RocksTimerStore") -> dict[str, Any]:
    """Full scan of the invariants (tests and ``rtimer`` diagnostics; O(keys)): the pending
    counter is exact, no key lies below the cursor, every in-flight key exists, every value
    decodes (in ``vlog``: its segment record checks out and holds its key), and every value
    segment's live count and bytes equal what the index points at. Returns the figures and a
    list of ``problems`` (empty when all hold)."""
    problems: list[str] = []
    live = undecodable = 0
    vlog = store.vlog
    seen: dict[int, list[int]] = {}
    index_entries: set[bytes] = set()
    dues: list[int] = []
    with store._lock:
        store._check_open()
        cursor = store._cursor()
        it = store._timer.iter()
        try:
            it.seek_to_first()
            while it.valid():
                raw = it.key()
                live += 1
                dues.append(K.key_due_ms(raw))
                if raw < cursor:
                    problems.append(f"key {raw.hex()} lies below the cursor {cursor.hex()}")
                value = it.value()
                try:
                    pointer = I.pointer_or_none(value) if vlog is not None else None
                    if pointer is not None:
                        entry = seen.setdefault(pointer.segment, [0, 0])
                        entry[0] += 1
                        entry[1] += pointer.length
                        value = vlog.read(raw, pointer)
                    keys = keyindex.message_keys(decode_value(raw, value))
                    index_entries.update(K.index_entry(raw, key) for key in keys)
                except CorruptRecordError as exc:
                    undecodable += 1
                    problems.append(str(exc))
                it.next()
            check_iterator(it, f"timer store {store.path} check")
        finally:
            del it
        if vlog is not None:
            for seg_id, seg in vlog.segments.items():
                count, nbytes = seen.pop(seg_id, (0, 0))
                if (count, nbytes) != (seg.live_count, seg.live_bytes):
                    problems.append(f"vlog segment {seg_id}: liveness row says {seg.live_count} "
                                    f"records / {seg.live_bytes} bytes, the index points at "
                                    f"{count} / {nbytes}")
            for seg_id, (count, _) in seen.items():
                problems.append(f"{count} index entries point into vlog segment {seg_id}, "
                                f"which has no liveness row")
        problems.extend(keyindex.check(store, index_entries, dues))
        if live != store._pending:
            problems.append(f"pending counter {store._pending} but {live} keys in the timer CF")
        missing = [raw for raw, v in zip(store._in_flight, store._timer.get(list(store._in_flight)))
                   if v is None] if store._in_flight else []
        if missing:
            problems.append(f"{len(missing)} in-flight keys are gone, first {missing[0].hex()}")
        return {"live_keys": live, "pending": store._pending, "undecodable": undecodable,
                "in_flight": len(store._in_flight), "problems": problems}
