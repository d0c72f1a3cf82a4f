"""Figures and the invariant check of the RocksDB timer store: RocksDB's properties and
tickers as ``stats`` reports them, a wait for compactions (benchmarks) and the full check.
Each function receives the parts it reads; the caller holds the store's lock where it says.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from rocks_timer.errors import CorruptRecordError
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.claims import Claims
from rocks_timer.timer.rocksdb.counts import Counts
from rocks_timer.timer.rocksdb.database import Database
from rocks_timer.timer.rocksdb.keyindex import KeyIndex, message_keys
from rocks_timer.timer.rocksdb.scan import check_iterator
from rocks_timer.timer.rocksdb.setaside import count_pointers, name_key, read_rows
from rocks_timer.timer.rocksdb.vlog import ValueLog
from rocks_timer.timer.rocksdb.vlog.liveness import liveness_problems
from rocks_timer.timer.store import StoreStats
from rocks_timer.timer.values import decode_value

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


def wait_for_compactions(db: Database, lock: threading.Lock, check_open: Callable[[], None],
                         quiet_ms: int, timeout_ms: int) -> bool:
    """Poll until no flush or compaction has run for ``quiet_ms`` (wall time: a benchmark aid,
    not engine logic). ``compaction-pending`` is not used: it can stick at 1 under universal."""
    deadline = time.monotonic() + timeout_ms / 1000
    quiet_since = None
    while time.monotonic() < deadline:
        with lock:
            check_open()
            running = sum(db.property_int(name) for name in (
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


def db_figures(db: Database) -> dict[str, Any]:
    """The ``timer`` family's size and compaction properties (lock held)."""
    extra = {label: db.timer_property_int(prop) for label, prop in CF_INT_PROPERTIES.items()}
    for label in ("num-running-compactions", "num-running-flushes"):
        extra[label.replace("-", "_")] = db.property_int(f"rocksdb.{label}")
    return extra


def store_stats(counts: dict[str, int], pending: int, extra: dict[str, Any]) -> StoreStats:
    """``stats()`` from the tickers, the pending count and the figures gathered under lock."""
    for label, ticker in TICKERS_IN_EXTRA.items():
        extra[label] = counts.get(ticker, 0)
    return StoreStats(
        engine="rocksdb", pending=pending,
        bytes_written={"wal": counts.get("rocksdb.wal.bytes", 0),
                       "flush": counts.get("rocksdb.flush.write.bytes", 0),
                       "compaction": counts.get("rocksdb.compact.write.bytes", 0),
                       "user": counts.get("rocksdb.bytes.written", 0),
                       "vlog": extra.get("vlog_appended_bytes", 0),
                       "vlog_relocation": extra.get("vlog_relocated_bytes", 0)},
        extra=extra)


def check(db: Database, claims: Claims, counts: Counts, keys: KeyIndex,
          vlog: ValueLog | None, where: Any) -> dict[str, Any]:
    """Full scan of the invariants (tests and ``rtimer`` diagnostics; O(keys); lock held): the
    pending counter is exact, no key lies below the cursor, every in-flight key exists, every
    value decodes (in ``vlog``: its segment record checks out and holds its key), every value
    segment's live count and bytes equal what the index points at, and the key index, the due
    counters and the topic counters match the keys. Returns the figures and a list of
    ``problems`` (empty when all hold)."""
    problems: list[str] = []
    live = undecodable = 0
    seen: dict[int, list[int]] = {}
    index_entries: set[bytes] = set()
    raws: list[bytes] = []
    cursor = claims.persisted()
    it = db.timer.iter()
    try:
        it.seek_to_first()
        while it.valid():
            raw = bytes(it.key())
            live += 1
            raws.append(raw)
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
                found = message_keys(decode_value(raw, value))
                index_entries.update(K.index_entry(raw, key) for key in found)
            except CorruptRecordError as exc:
                undecodable += 1
                problems.append(f"{name_key(raw)}: {exc}")
            it.next()
        check_iterator(it, f"timer store {where} check")
    finally:
        del it
    if vlog is not None:
        count_pointers(seen, read_rows(db.corrupt))  # set aside: still counted live
        problems.extend(liveness_problems(vlog.segments, seen))
    problems.extend(keys.check(index_entries, raws, counts.corrupt))
    if live != counts.pending:
        problems.append(f"pending counter {counts.pending} but {live} keys in the timer CF")
    in_flight = claims.keys()
    missing = [raw for raw, v in zip(in_flight, db.timer.get(in_flight)) if v is None] \
        if in_flight else []
    if missing:
        problems.append(f"{len(missing)} in-flight keys are gone, first {missing[0].hex()}")
    return {"live_keys": live, "pending": counts.pending, "undecodable": undecodable,
            "in_flight": len(in_flight), "problems": problems}
