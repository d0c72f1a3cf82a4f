"""A test-only file layer that knows what a power cut would keep of a data dir.

:class:`SyncLedger` watches every ``os.fsync``/``os.fdatasync`` the project makes (they are
wrapped for the test's duration) and remembers, per inode, the file's length when the sync
began: everything written before the call is covered by it. Inodes, not paths, so a state file
written as a temp file, fsynced and renamed keeps its record. It also remembers the length of
each RocksDB WAL file at every point where our code asks RocksDB to sync its WAL (a write with
``sync=True``, ``flush_wal(True)``), through :class:`RdictSpy` around the store's ``Rdict``.

:func:`power_cut_copy` then copies a data dir as the disk would hold it after losing power:

- files the project writes: cut to the length of their last sync (never synced: empty);
- RocksDB WAL files (``*.log``): cut to their length at the last WAL sync (none: empty);
- RocksDB's other files (SSTs, MANIFEST, CURRENT, OPTIONS, blobs): kept, because RocksDB
  fsyncs them itself before a MANIFEST entry or CURRENT points at them;
- the wheel's slot file (``timerwheel``, an mmap updated in place): kept as last written, since
  a length says nothing about in-place updates; its recovery rebuilds slots from the TimerLog
  after the checkpoint, and the TimerLog and checkpoint are cut like every other file.

File names (creations, renames) are taken as durable: the CommitLog fsyncs its directory when
it adds a segment and the state files fsync theirs after a rename.
"""
from __future__ import annotations

import itertools
import os
import shutil
import stat
import threading
from pathlib import Path
from typing import Any

ROCKSDB_DIR = "timer-rocksdb"
IN_PLACE_FILES = {"timerwheel"}
SKIPPED = {"rtimer.sock"}
_CHUNK = 1 << 20


class SyncLedger:
    """Lengths covered by the last sync of each file (by inode) and of each WAL file (by path)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._files: dict[tuple[int, int], tuple[int, int]] = {}  # inode -> (seq, length)
        self.wal: dict[str, int] = {}
        self.syncs = 0
        self.wal_syncs = 0

    def install(self, monkeypatch) -> "SyncLedger":
        real = {"fsync": os.fsync, "fdatasync": os.fdatasync}

        def wrap(name: str):
            call = real[name]

            def synced(fd: Any) -> None:
                self._before_sync(fd)
                return call(fd)
            return synced

        for name in real:
            monkeypatch.setattr(os, name, wrap(name))
        return self

    def _before_sync(self, fd: Any) -> None:
        st = os.fstat(fd if isinstance(fd, int) else fd.fileno())
        if not stat.S_ISREG(st.st_mode):
            return
        seq = next(self._seq)
        key = (st.st_dev, st.st_ino)
        with self._lock:
            self.syncs += 1
            old = self._files.get(key)
            if old is None or old[0] < seq:
                self._files[key] = (seq, st.st_size)

    def synced_length(self, path: Path) -> int:
        st = os.stat(path)
        with self._lock:
            found = self._files.get((st.st_dev, st.st_ino))
        return 0 if found is None else found[1]

    def wal_synced(self, db_dir: Path) -> None:
        """RocksDB synced its WAL: every live WAL file is on disk up to its current length."""
        with self._lock:
            self.wal_syncs += 1
            for name in os.listdir(db_dir):
                if name.endswith(".log"):
                    try:
                        self.wal[str(Path(db_dir, name))] = os.stat(Path(db_dir, name)).st_size
                    except FileNotFoundError:
                        pass  # deleted as obsolete meanwhile


class RdictSpy:
    """Stands in for a store's ``Rdict``; tells the ledger when the WAL was synced."""

    def __init__(self, db: Any, ledger: SyncLedger, path: Path):
        self._db, self._ledger, self._path = db, ledger, Path(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def write(self, batch: Any, options: Any = None) -> Any:
        result = self._db.write(batch) if options is None else self._db.write(batch, options)
        if options is not None and options.sync:
            self._ledger.wal_synced(self._path)
        return result

    def flush_wal(self, sync: bool = False) -> Any:
        result = self._db.flush_wal(sync)
        if sync:
            self._ledger.wal_synced(self._path)
        return result


def spy_on_rocksdb(broker, ledger: SyncLedger) -> None:
    """Route the broker's RocksDB store through :class:`RdictSpy` (no-op for other engines)."""
    store = broker.timer
    if getattr(store, "_db", None) is not None and not isinstance(store._db, RdictSpy):
        store._db = RdictSpy(store._db, ledger, store.path)


def power_cut_copy(src: Path, dst: Path, ledger: SyncLedger) -> dict[str, int]:
    """Copy ``src`` to ``dst`` as a power cut would leave it; returns bytes cut per kind."""
    cut = {"files": 0, "wal": 0}
    for directory, _, filenames in os.walk(src):
        rel = Path(directory).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        in_rocksdb = ROCKSDB_DIR in rel.parts and "vlog" not in rel.parts
        for name in filenames:
            source, target = Path(directory, name), dst / rel / name
            if name in SKIPPED or not source.is_file():
                continue
            size = source.stat().st_size
            if in_rocksdb and name.endswith(".log"):
                keep = min(size, ledger.wal.get(str(source), 0))
                cut["wal"] += size - keep
            elif in_rocksdb or name in IN_PLACE_FILES or name == "broker.lock":
                keep = size
            else:
                keep = min(size, ledger.synced_length(source))
                cut["files"] += size - keep
            _copy_prefix(source, target, keep, sparse=name in IN_PLACE_FILES)
    return cut


def _copy_prefix(source: Path, target: Path, length: int, sparse: bool) -> None:
    if not sparse and length == source.stat().st_size:
        shutil.copyfile(source, target)
        return
    with open(source, "rb") as src, open(target, "wb") as out:
        done = 0
        while done < length:
            chunk = src.read(min(_CHUNK, length - done))
            if not chunk:
                break
            if sparse and chunk.count(0) == len(chunk):
                out.seek(len(chunk), os.SEEK_CUR)  # keep the hole a hole
            else:
                out.write(chunk)
            done += len(chunk)
        out.truncate(done)
