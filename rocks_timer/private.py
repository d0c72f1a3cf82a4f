"""Owner-only data (ARCHITECTURE §4): every directory a broker creates is 0700, every file 0600.

Three layers, because some files are created by code that takes no mode argument (RocksDB's
C++ files: SSTs, WAL, MANIFEST, LOG; ``open(path, "w")`` in the small state files):

- our own ``os.open`` calls pass :data:`FILE_MODE` and our directories are made by
  :func:`private_dir`;
- while at least one :class:`~rocks_timer.Broker` is open the process umask includes 077
  (:func:`hold_owner_only_umask`, counted, so nested brokers work; the previous umask is put
  back when the last one closes), which covers every file RocksDB or a library creates;
- opening a data dir tightens what an older version (or another tool) left more open
  (:func:`tighten`, which touches only the entries rtimer keeps there), so an upgraded data dir
  ends up owner-only too; a directory that also holds other files keeps its own mode.
"""
from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path

from rocks_timer.fileio import mkdir_durably

log = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
OWNER_ONLY_UMASK = 0o077
# what a broker keeps at the top of its data dir (the timer engines', the CommitLog's, the
# ConsumeQueues', the state files', the lock and the socket of ``rtimer run``)
DATA_DIR_ENTRIES = frozenset({"broker.lock", "rtimer.sock", "config", "commitlog",
                              "consumequeue", "timer-rocksdb", "wheel"})

_umask_lock = threading.Lock()
_umask_holders = 0
_saved_umask: int | None = None


def private_dir(path: Path | str) -> Path:
    """Create ``path`` (and missing parents inside it) owner-only and durable by name
    (:func:`rocks_timer.fileio.mkdir_durably`); an existing directory is left as it is
    (:func:`tighten` handles data dirs)."""
    path = Path(path)
    mkdir_durably(path, DIR_MODE)
    return path


def hold_owner_only_umask() -> None:
    """Add 077 to the process umask until the matching :func:`release_owner_only_umask`."""
    global _umask_holders, _saved_umask
    with _umask_lock:
        if _umask_holders == 0:
            _saved_umask = os.umask(OWNER_ONLY_UMASK)
            os.umask(_saved_umask | OWNER_ONLY_UMASK)
        _umask_holders += 1


def release_owner_only_umask() -> None:
    global _umask_holders, _saved_umask
    with _umask_lock:
        if _umask_holders == 0:
            return
        _umask_holders -= 1
        if _umask_holders == 0 and _saved_umask is not None:
            os.umask(_saved_umask)
            _saved_umask = None


def is_data_dir_or_new(path: Path | str) -> bool:
    """True for a directory that is missing, empty, or holds only what rtimer puts in a data dir
    (:data:`DATA_DIR_ENTRIES`): the directory itself may then be made 0700. A directory that
    also holds a user's own files (``--data-dir ~`` by mistake) keeps its mode."""
    path = Path(path)
    if not path.is_dir():
        return True
    with os.scandir(path) as entries:
        return all(entry.name in DATA_DIR_ENTRIES for entry in entries)


def tighten(root: Path | str, whole_dir: bool = True) -> int:
    """chmod what rtimer keeps in the data dir ``root`` (its :data:`DATA_DIR_ENTRIES`, and
    everything under them) to owner-only: directories 0700, other entries 0600; symlinks are not
    followed, other entries of ``root`` are never touched. ``whole_dir``: ``root`` itself too.
    Returns how many entries changed."""
    changed = 0
    root = Path(root)

    def fix(path: str, want: int) -> None:
        nonlocal changed
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return  # removed meanwhile, or not made by this engine
        if stat.S_ISLNK(st.st_mode) or stat.S_IMODE(st.st_mode) == want:
            return
        os.chmod(path, want)
        changed += 1

    if whole_dir:
        fix(str(root), DIR_MODE)
    for name in sorted(DATA_DIR_ENTRIES):
        top = os.path.join(root, name)
        if not os.path.isdir(top) or os.path.islink(top):
            fix(top, FILE_MODE)
            continue
        fix(top, DIR_MODE)
        for directory, dirnames, filenames in os.walk(top):
            for entry in dirnames:
                fix(os.path.join(directory, entry), DIR_MODE)
            for entry in filenames:
                fix(os.path.join(directory, entry), FILE_MODE)
    if changed:
        log.info("data dir %s: made %d entries owner-only (0700/0600)", root, changed)
    return changed
