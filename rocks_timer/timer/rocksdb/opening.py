"""Opening a RocksDB timer store directory: the refusal to create a database over damaged data,
the open itself (compaction styles read from ``meta`` first, RocksDB's errors turned into the
error tree), the state read from ``meta``, the key index built where it is missing; and
RocksDB's repair.
"""
from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any, Callable, TypeVar

from rocksdict import Options, Rdict

from rocks_timer.config import BrokerConfig
from rocks_timer.errors import (ConfigError, CorruptRecordError, RocksTimerError,
                                StoreLockedError)
from rocks_timer.fileio import mkdir_durably
from rocks_timer.timer.rocksdb import meta as rocks_meta
from rocks_timer.timer.rocksdb.database import CORRUPT_CF, META_CF, TIMER_CF, Database
from rocks_timer.timer.rocksdb.profiles import build_options, compaction_style
from rocks_timer.timer.rocksdb.profiles import index_options as profile_index_options
from rocks_timer.timer.rocksdb.profiles import meta_options
from rocks_timer.timer.rocksdb.status import storage_io_error

T = TypeVar("T")
__all__ = ["CORRUPT_CF", "META_CF", "TIMER_CF", "open_database", "construct", "finish",
           "refuse_damaged", "rocks_error"]
_LOCK_MARKERS = ("lock hold by", "No locks available", "Resource temporarily unavailable",
                 "While lock file")


REPAIR_HINT = ("stop the broker, then run `rtimer repair` (it builds a repaired store beside "
               "this one, keeps this one as evidence, and names every message it cannot recover)")
_ROCKS_DATA = (".sst", ".log", ".blob")


def rocks_error(path: Path, text: str) -> Exception:
    """The error of the error tree a RocksDB status message means: the store locked, the disk
    refusing (``StoreIOError``, status.py: never taken for damage), damage
    (``CorruptRecordError`` naming ``rtimer repair``), or anything else (``ConfigError``)."""
    if any(marker in text for marker in _LOCK_MARKERS):
        return StoreLockedError(f"timer store {path} is in use by another process or another "
                                f"open store in this process (RocksDB: {text})")
    io_error = storage_io_error(text, f"timer store {path}")
    if io_error is not None:  # before the damage test: a full disk names MANIFEST too
        return io_error
    if "Corruption" in text or "MANIFEST" in text or "CURRENT" in text:
        return CorruptRecordError(f"timer store {path} is damaged (RocksDB: {text}); "
                                  f"{REPAIR_HINT}", where=str(path))
    return ConfigError(f"cannot open timer store {path}: {text}")


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
            f"to start empty over them; {REPAIR_HINT}", where=str(path))


def open_database(path: Path, config: BrokerConfig) -> tuple[Database, "rocks_meta.StoredState"]:
    """Open (or create) the RocksDB at ``path`` with the store's column families, after the
    refusals above; check the format settings in ``meta`` and read the stored state."""
    style = compaction_style(config.rocksdb_profile)  # ConfigError for an unknown profile
    refuse_damaged(path)
    mkdir_durably(path)  # RocksDB fsyncs the directory's entries, not its name
    db_options = build_options(config.rocksdb_profile)
    try:
        index_style, meta_style = rocks_meta.compactions(path, config.rocksdb_layout,
                                                         config.vlog_index_compaction, META_CF)
    except RocksTimerError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged table read by the read-only open
        raise rocks_error(path, str(exc)) from None
    index_options = profile_index_options(config.rocksdb_profile, index_style)
    families = {TIMER_CF: index_options, META_CF: meta_options(meta_style),
                CORRUPT_CF: Options(raw_mode=True)}
    try:
        db = Rdict(str(path), db_options, column_families=families)
    except Exception as exc:  # rocksdict raises plain Exception for RocksDB status errors
        raise rocks_error(path, str(exc)) from None
    try:
        state = rocks_meta.load(db, META_CF, style, str(path), config.rocksdb_layout,
                                index_style, meta_style)
    except BaseException as exc:
        _close_failed(db, path, exc)
    sync_writes = config.rocksdb_sync or config.flush_disk_type == "sync"
    return Database(db, db_options, sync_writes), state


def _close_failed(db: Any, path: Path, exc: BaseException) -> None:
    """Close a DB whose open failed half way and raise the error of the error tree."""
    if isinstance(exc, (RocksTimerError, OSError)) or not isinstance(exc, Exception):
        error = exc.with_traceback(None)
    else:  # rocksdict: a damaged table read while loading
        error = rocks_error(path, str(exc))
    # the failed frames hold column family handles, which keep the LOCK after close: drop
    # them first, or every later open says "in use"
    del exc
    gc.collect()
    db.close()
    raise error


def construct(path: Path, db: Database, build: Callable[[], T]) -> T:
    """``build()`` the store over ``db``; a failure closes the database first (see
    :func:`_close_failed`) and raises the error of the error tree."""
    try:
        return build()
    except BaseException as exc:
        error = exc
    _close_failed(db, path, error)
    raise AssertionError("unreachable")  # pragma: no cover


def finish(path: Path, store: Any, step: Callable[[], Any]) -> None:
    """Run the last step of an open (the key index build); a failure closes the store and
    raises the error of the error tree."""
    try:
        step()
    except (RocksTimerError, OSError):
        store.close()
        raise
    except Exception as exc:  # noqa: BLE001 - rocksdict: a damaged table met by the walk
        store.close()
        raise rocks_error(path, str(exc)) from None
    except BaseException:
        store.close()
        raise
