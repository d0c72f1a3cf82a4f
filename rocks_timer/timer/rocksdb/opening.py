"""Opening a RocksDB timer store directory: the refusal to create a database over damaged data,
the open itself (compaction styles read from ``meta`` first, RocksDB's errors turned into the
error tree), the state read from ``meta``, the key index built where it is missing; and
RocksDB's repair.
"""
from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocksdict import Options, Rdict

from rocks_timer.config import BrokerConfig
from rocks_timer.errors import ConfigError, CorruptRecordError, StoreLockedError
from rocks_timer.fileio import mkdir_durably
from rocks_timer.timer.rocksdb import keyindex
from rocks_timer.timer.rocksdb import meta as rocks_meta
from rocks_timer.timer.rocksdb.profiles import build_options, compaction_style
from rocks_timer.timer.rocksdb.profiles import index_options as profile_index_options
from rocks_timer.timer.rocksdb.profiles import meta_options
from rocks_timer.timer.rocksdb.status import storage_io_error

if TYPE_CHECKING:
    from rocks_timer.timer.rocksdb.store import RocksTimerStore

TIMER_CF, META_CF, CORRUPT_CF = "timer", "meta", "corrupt"
_LOCK_MARKERS = ("lock hold by", "No locks available", "Resource temporarily unavailable",
                 "While lock file")


REPAIR_HINT = ("stop the broker, copy the data dir somewhere safe, then run `rtimer repair` "
               "(RocksDB's repair: it rebuilds the manifest from the table files it finds)")
_ROCKS_DATA = (".sst", ".log", ".blob")


def refuse_damaged(path: Path) -> None:
    """Refuse a store directory whose data files are there but whose RocksDB entry point
    (``CURRENT``) is not, and a vlog store whose index is gone: opening would create a fresh,
    empty database over acknowledged messages."""
    if not path.is_dir():
        return
    names = set(os.listdir(path))
    rocks_files = [n for n in names if n.endswith(_ROCKS_DATA) or n.startswith("MANIFEST-")]
    if rocks_files and "CURRENT" not in names:
        raise CorruptRecordError(
            f"timer store {path} holds RocksDB files ({len(rocks_files)}, e.g. "
            f"{sorted(rocks_files)[0]}) but no CURRENT file: refusing to create a new database "
            f"over them; {REPAIR_HINT}", where=str(path))
    vlog = path / "vlog"
    if not rocks_files and vlog.is_dir() and any(vlog.glob("*.vlog")):
        raise CorruptRecordError(
            f"timer store {path} has value segments in {vlog} but no RocksDB index: refusing "
            f"to start empty over them; restore the index files from a copy", where=str(path))


def open_store(cls: "type[RocksTimerStore]", path: Path, config: BrokerConfig,
               reclaim_after_deletes: int) -> "RocksTimerStore":
    """``RocksTimerStore.open``."""
    path = Path(path)
    style = compaction_style(config.rocksdb_profile)  # ConfigError for an unknown profile
    refuse_damaged(path)
    mkdir_durably(path)  # RocksDB fsyncs the directory's entries, not its name
    db_options = build_options(config.rocksdb_profile)
    index_style, meta_style = rocks_meta.compactions(path, config.rocksdb_layout,
                                                     config.vlog_index_compaction, META_CF)
    index_options = profile_index_options(config.rocksdb_profile, index_style)
    families = {TIMER_CF: index_options, META_CF: meta_options(meta_style),
                CORRUPT_CF: Options(raw_mode=True)}
    try:
        db = Rdict(str(path), db_options, column_families=families)
    except Exception as exc:  # rocksdict raises plain Exception for RocksDB status errors
        text = str(exc)
        if any(marker in text for marker in _LOCK_MARKERS):
            raise StoreLockedError(
                f"timer store {path} is in use by another process or another open store "
                f"in this process (RocksDB: {text})") from None
        io_error = storage_io_error(text, f"cannot open timer store {path}")
        if io_error is not None:  # before the damage test: a full disk names MANIFEST too
            raise io_error from None
        if "Corruption" in text or "MANIFEST" in text:
            raise CorruptRecordError(f"timer store {path} is damaged (RocksDB: {text}); "
                                     f"{REPAIR_HINT}", where=str(path)) from None
        raise ConfigError(f"cannot open timer store {path}: {text}") from None
    try:
        state = rocks_meta.load(db, META_CF, style, str(path), config.rocksdb_layout,
                                index_style, meta_style)
        store = cls(path, config, db, db_options, state, reclaim_after_deletes)
    except BaseException as exc:
        # the failed constructor's frames hold column family handles, which keep the LOCK
        # after close: drop them first, or every later open says "in use"
        error = exc.with_traceback(None)
    else:
        error = None
    if error is not None:
        gc.collect()
        db.close()
        raise error
    try:
        keyindex.ensure_built(store)
    except BaseException:
        store.close()
        raise
    return store


def repair_store(cls: "type[RocksTimerStore]", path: Path, config: BrokerConfig) -> dict[str, Any]:
    """``RocksTimerStore.repair``."""
    path = Path(path)
    if not path.is_dir():
        raise ConfigError(f"timer store {path} does not exist; nothing to repair")
    try:
        Rdict.repair(str(path), build_options(config.rocksdb_profile))
    except Exception as exc:  # rocksdict raises plain Exception for RocksDB status errors
        text = str(exc)
        if any(marker in text for marker in _LOCK_MARKERS):
            raise StoreLockedError(f"timer store {path} is in use; stop the broker before "
                                   f"repairing it (RocksDB: {text})") from None
        raise CorruptRecordError(f"RocksDB could not repair {path}: {text}",
                                 where=str(path)) from None
    with cls.open(path, config) as store:
        report = store.check()
        report["layout"] = store.layout
    return report
