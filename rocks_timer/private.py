"""Owner-only data (DESIGN §15): every directory a broker creates is 0700, every file 0600.

Three layers, because some files are created by code that takes no mode argument (RocksDB's
C++ files: SSTs, WAL, MANIFEST, LOG; ``open(path, "w")`` in the small state files):

- our own ``os.open`` calls pass :data:`FILE_MODE` and our directories are made by
  :func:`private_dir`;
- while at least one :class:`~rocks_timer.Broker` is open the process umask includes 077
  (:func:`hold_owner_only_umask`, counted, so nested brokers work; the previous umask is put
  back when the last one closes), which covers every file RocksDB or a library creates;
- opening a data dir tightens what an older version (or another tool) left more open
  (:func:`tighten`), so an upgraded data dir ends up owner-only too.
"""
from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path

log = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
OWNER_ONLY_UMASK = 0o077

_umask_lock = threading.Lock()
_umask_holders = 0
_saved_umask: int | None = None


def private_dir(path: Path | str) -> Path:
    """Create ``path`` (and missing parents inside it) owner-only; an existing directory is
    left as it is (:func:`tighten` handles data dirs)."""
    path = Path(path)
    if not path.is_dir():
        missing = []
        here = path
        while not here.exists():
            missing.append(here)
            here = here.parent
        for directory in reversed(missing):
            try:
                directory.mkdir(mode=DIR_MODE)
            except FileExistsError:
                pass
            os.chmod(directory, DIR_MODE)  # mkdir's mode is filtered by the umask
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


def tighten(root: Path | str) -> int:
    """chmod ``root`` and everything under it to owner-only (directories 0700, other entries
    0600; symlinks are not followed). Returns how many entries changed."""
    changed = 0
    root = Path(root)

    def fix(path: str, want: int) -> None:
        nonlocal changed
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return  # removed meanwhile
        if stat.S_ISLNK(st.st_mode) or stat.S_IMODE(st.st_mode) == want:
            return
        os.chmod(path, want)
        changed += 1

    fix(str(root), DIR_MODE)
    for directory, dirnames, filenames in os.walk(root):
        for name in dirnames:
            fix(os.path.join(directory, name), DIR_MODE)
        for name in filenames:
            fix(os.path.join(directory, name), FILE_MODE)
    if changed:
        log.info("data dir %s: made %d entries owner-only (0700/0600)", root, changed)
    return changed
