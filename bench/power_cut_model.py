"""A model of what a power cut keeps of a data dir: the strict POSIX model (used by
``bench.power_cut`` and tests/faults/test_power_cut.py; never by the broker itself).

The model is the one RocksDB's own fault-injection tests use (``FaultInjectionTestFS``):

- a file's **data** survives up to its own last ``fsync``/``fdatasync`` (byte for byte: bytes
  written, overwritten or truncated after it are undone; a file never synced is empty);
- a **name** (a file created, renamed over another, unlinked; a directory made) survives only
  once its directory has been fsynced after the change; otherwise, after the cut, a new file is
  absent, a rename is undone (the old file is back under the name) and an unlink is undone (the
  file is back, with its last synced data).

:class:`StrictDisk` watches one data dir at the system-call level of what Python calls, wrapping
``os.open``, ``os.write``, ``os.pwrite``, ``os.ftruncate``, ``os.fsync``, ``os.fdatasync``,
``os.rename``, ``os.replace``, ``os.unlink``, ``os.mkdir`` and the built-in ``open`` (file
objects: their data is re-read whole at their fsync), for the test's duration. The C extension's
``pwrite_all`` is switched to its Python reference so its writes are seen too. It keeps, per
inode the project created, the bytes its last sync made durable, and per directory the names its
last fsync made durable (a listing with inodes, taken at the fsync). Every watched call is an
*event*; a test asks for a cut at chosen events (:meth:`StrictDisk.cut_at`), and the cut image is
built right there, before the call runs (so the call itself is lost).

What Python cannot see, and how it is modelled instead (the assumptions, DECISIONS "Durability
by name"):

- **RocksDB's own files** (``timer-rocksdb/`` except ``vlog/``): RocksDB makes its syscalls in
  C++. It is taken at its documented word: SSTs, MANIFEST, CURRENT and OPTIONS are fsynced (and
  their directory) before anything refers to them, so they are copied as they are at the cut; a
  WAL file that is no longer the newest was synced by RocksDB before a flush switched away from
  it (a DB with several column families syncs closed WALs, ``SyncClosedLogs``), so it is copied
  whole; the newest WAL is durable only up to its length when our code last asked for a WAL sync
  (a write with ``sync=True`` returned, or ``flush_wal(True)`` was called: the length *before*
  the call, so records written meanwhile by another thread do not count). Those requests are
  seen through :class:`RdictProxy`, which the model puts in place of the ``Rdict`` the store
  opens. The ``timer-rocksdb`` directory's own name and its ``vlog/`` subdirectory are ours and
  follow the strict model.
- **The wheel's slot file** (``timerwheel``, a shared mapping updated in place): its name follows
  the strict model; its content is taken as last written (the mapping's pages are not seen); its
  recovery revises slots from the TimerLog after the checkpoint anyway.
- ``broker.lock`` and ``rtimer.sock`` carry no promise and are left out.
"""
from __future__ import annotations

import builtins
import io
import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROCKSDB_DIR = "timer-rocksdb"
IN_PLACE_FILES = {"timerwheel"}
SKIPPED = {"rtimer.sock", "broker.lock"}
_CHUNK = 1 << 20

_real = {name: getattr(os, name) for name in (
    "open", "write", "pwrite", "ftruncate", "fsync", "fdatasync", "rename", "replace", "unlink",
    "remove", "mkdir")}
_real_open = builtins.open


class Node:
    """One inode the project made under the watched root."""

    __slots__ = ("kind", "path", "durable", "dirty", "cut_to", "whole", "ino")

    def __init__(self, kind: str, path: str, ino: tuple[int, int]):
        self.kind = kind  # "file" or "dir"
        self.path = path  # its current name (None once unlinked)
        self.ino = ino
        # file: the bytes its last sync made durable; dir: name -> Node its last fsync made durable
        self.durable: bytearray | dict[str, Node] = bytearray() if kind == "file" else {}
        self.dirty: list[tuple[int, int]] = []  # (offset, length) written since the last sync
        self.cut_to: int | None = None  # smallest size it was truncated to since the last sync
        self.whole = False  # written through a file object: re-read whole at the next sync


@dataclass
class Event:
    seq: int
    op: str
    path: str | None
    thread: str
    phase: str | None


@dataclass
class CutPoint:
    """Cut before the event ``delay`` events after the ``occurrence``-th one matching ``match``
    (0 = the first; delay 0 = that event itself)."""

    label: str
    match: Callable[[Event], bool]
    occurrence: int = 0
    delay: int = 0
    seen: int = 0
    countdown: int | None = None
    taken: bool = False


@dataclass
class TakenCut:
    label: str
    event: Event
    path: Path
    context: Any  # what the test captured at the cut (its ledger of promises)


@dataclass
class StrictDisk:
    root: Path
    cuts_dir: Path
    capture: Callable[[], Any] = lambda: None
    events: int = 0
    phase: str | None = None
    wal_syncs: int = 0
    syncs: int = 0
    dir_syncs: int = 0
    taken: list[TakenCut] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = Path(os.path.abspath(self.root))
        self.parent = str(self.root.parent)
        self._root = str(self.root)
        self._lock = threading.RLock()
        self._local = threading.local()
        self._nodes: dict[tuple[int, int], Node] = {}
        self._points: list[CutPoint] = []
        self._wal: dict[str, int] = {}  # RocksDB WAL path -> length at the last sync request
        st = os.stat(self.parent)
        top = Node("dir", self.parent, (st.st_dev, st.st_ino))
        top.durable = {name: None for name in os.listdir(self.parent)}  # what was there before
        self._nodes[top.ino] = top
        self._top = top

    # -- set-up ---------------------------------------------------------------------------------
    def install(self) -> "StrictDisk":
        """Wrap the calls (until :meth:`uninstall`; also a context manager)."""
        import rocks_timer.fileio as fileio
        from rocks_timer.timer.rocksdb import opening
        self._saved = [(fileio, "_native_pwrite_all"), (builtins, "open"), (io, "open"),
                       (opening, "Rdict")] + [(os, name) for name in _real]
        self._saved = [(owner, name, getattr(owner, name)) for owner, name in self._saved]
        fileio._native_pwrite_all = None  # its writes go through os.pwrite, seen here
        for name in _real:
            setattr(os, name, getattr(self, f"_{name}"))
        builtins.open = io.open = self._file_open
        opening.Rdict = _rdict_factory(opening.Rdict, self)
        return self

    def uninstall(self) -> None:
        for owner, name, value in reversed(getattr(self, "_saved", [])):
            setattr(owner, name, value)
        self._saved = []

    def __enter__(self) -> "StrictDisk":
        return self.install()

    def __exit__(self, *exc: Any) -> None:
        self.uninstall()

    def cut_at(self, label: str, match: Callable[[Event], bool], occurrence: int = 0,
               delay: int = 0) -> None:
        self._points.append(CutPoint(label, match, occurrence, delay))

    def watches(self, path: Any) -> bool:
        return self._scoped(path) is not None

    def mark(self, op: str, path: str | None = None) -> None:
        """An event of the caller's own (a cut point after something Python cannot see)."""
        self._event(op, path)

    @property
    def points_missed(self) -> list[str]:
        return [p.label for p in self._points if not p.taken]

    # -- what the model keeps -----------------------------------------------------------------------
    def _scoped(self, path: Any) -> str | None:
        if isinstance(path, int) or path is None:
            return None
        p = os.path.abspath(os.fsdecode(path))
        if p == self._root or p.startswith(self._root + os.sep) or p == self.parent:
            return p
        return None

    def _node_of_fd(self, fd: Any) -> Node | None:
        if not isinstance(fd, int):
            fd = fd.fileno()
        st = os.fstat(fd)
        return self._nodes.get((st.st_dev, st.st_ino))

    def _register(self, path: str, kind: str) -> Node:
        st = os.lstat(path)
        node = Node(kind, path, (st.st_dev, st.st_ino))
        self._nodes[node.ino] = node
        return node

    def _event(self, op: str, path: str | None) -> None:
        if getattr(self._local, "busy", False):
            return
        with self._lock:
            self.events += 1
            event = Event(self.events, op, path, threading.current_thread().name, self.phase)
            for point in self._points:
                if point.taken:
                    continue
                if point.countdown is None and point.match(event):
                    point.seen += 1
                    if point.seen > point.occurrence:
                        point.countdown = point.delay
                if point.countdown is not None:
                    if point.countdown == 0:
                        point.taken = True
                        self._take(point.label, event)
                    point.countdown -= 1

    def _take(self, label: str, event: Event) -> None:
        target = self.cuts_dir / f"cut-{len(self.taken):03d}"
        self._local.busy = True
        try:
            self.image(target)
        finally:
            self._local.busy = False
        self.taken.append(TakenCut(label, event, target, self.capture()))

    def image(self, target: Path) -> None:
        """Write the data dir as a power cut now would leave it to ``target``."""
        with self._lock:
            root = self._top.durable.get(self.root.name)
            if root is None:  # the data dir's own name never became durable
                _real["mkdir"](target)
                return
            self._build(root, target)

    def _build(self, node: Node, target: Path) -> None:
        _real["mkdir"](target)
        if node.path is not None and Path(node.path).name == ROCKSDB_DIR \
                and Path(node.path).parent == self.root:
            self._copy_rocksdb(Path(node.path), target)
        for name, child in node.durable.items():
            if child is None or name in SKIPPED:
                continue
            if child.kind == "dir":
                self._build(child, target / name)
            elif name in IN_PLACE_FILES and child.path is not None:
                _copy_sparse(Path(child.path), target / name)
            else:
                with _real_open(target / name, "wb") as out:
                    out.write(child.durable)

    def _copy_rocksdb(self, live: Path, target: Path) -> None:
        ours = {n.path for n in self._nodes.values() if n.path is not None}
        try:
            names = os.listdir(live)
        except FileNotFoundError:
            return
        wals = sorted(n for n in names if n.endswith(".log"))
        for name in names:
            source = live / name
            if str(source) in ours or name.startswith("LOG") or not source.is_file():
                continue
            keep = None
            if name.endswith(".log") and name == wals[-1]:
                keep = self._wal.get(str(source), 0)
            try:
                with _real_open(source, "rb") as src:
                    data = src.read() if keep is None else src.read(keep)
            except FileNotFoundError:
                continue  # deleted as obsolete meanwhile
            with _real_open(target / name, "wb") as out:
                out.write(data)

    def wal_sync_requested(self, db_dir: str) -> dict[str, int]:
        """The WAL lengths before a sync request (recorded once it returned)."""
        out = {}
        for name in os.listdir(db_dir):
            if name.endswith(".log"):
                try:
                    out[os.path.join(db_dir, name)] = os.stat(os.path.join(db_dir, name)).st_size
                except FileNotFoundError:
                    pass
        return out

    def wal_synced(self, lengths: dict[str, int]) -> None:
        with self._lock:
            self.wal_syncs += 1
            for path, length in lengths.items():
                self._wal[path] = max(self._wal.get(path, 0), length)

    # -- the wrapped calls ---------------------------------------------------------------------------
    def _open(self, path, flags, mode=0o777, *, dir_fd=None):
        p = self._scoped(path) if dir_fd is None else None
        if p is None:
            return _real["open"](path, flags, mode, dir_fd=dir_fd)
        creates = bool(flags & os.O_CREAT) and not os.path.lexists(p)
        if creates:
            self._event("create", p)
        fd = _real["open"](path, flags, mode)
        with self._lock:
            st = os.fstat(fd)
            node = self._nodes.get((st.st_dev, st.st_ino))
            if node is None and (creates or stat.S_ISDIR(st.st_mode)):
                node = self._register(p, "dir" if stat.S_ISDIR(st.st_mode) else "file")
            if node is not None and flags & os.O_TRUNC and not creates:
                node.cut_to = 0
        return fd

    def _file_open(self, file, mode="r", *args, **kwargs):
        writes = any(c in mode for c in "wax+")
        if not writes:
            return _real_open(file, mode, *args, **kwargs)
        if isinstance(file, int):
            handle = _real_open(file, mode, *args, **kwargs)
            node = self._node_of_fd(file)
            if node is not None:
                node.whole = True
            return handle
        p = self._scoped(file)
        if p is None:
            return _real_open(file, mode, *args, **kwargs)
        creates = not os.path.lexists(p)
        self._event("create" if creates else "open-write", p)
        handle = _real_open(file, mode, *args, **kwargs)
        with self._lock:
            node = self._node_of_fd(handle.fileno())
            if node is None and creates:
                node = self._register(p, "file")
            if node is not None:
                node.whole = True
        return handle

    def _write(self, fd, data):
        node = self._node_of_fd(fd)
        if node is None:
            return _real["write"](fd, data)
        self._event("write", node.path)
        pos = os.lseek(fd, 0, os.SEEK_CUR)
        n = _real["write"](fd, data)
        node.dirty.append((pos, n))
        return n

    def _pwrite(self, fd, data, offset):
        node = self._node_of_fd(fd)
        if node is None:
            return _real["pwrite"](fd, data, offset)
        self._event("pwrite", node.path)
        n = _real["pwrite"](fd, data, offset)
        node.dirty.append((offset, n))
        return n

    def _ftruncate(self, fd, length):
        node = self._node_of_fd(fd)
        if node is not None:
            self._event("ftruncate", node.path)
            node.cut_to = length if node.cut_to is None else min(node.cut_to, length)
        return _real["ftruncate"](fd, length)

    def _fsync(self, fd):
        return self._sync("fsync", fd)

    def _fdatasync(self, fd):
        return self._sync("fdatasync", fd)

    def _sync(self, op: str, fd):
        node = self._node_of_fd(fd)
        if node is None:
            return _real[op](fd)
        self._event(op, node.path)
        raw = fd if isinstance(fd, int) else fd.fileno()
        with self._lock:  # what the sync covers: everything done before it
            if node.kind == "dir":
                self.dir_syncs += 1
                node.durable = self._listing(node.path)
            else:
                self.syncs += 1
                self._settle(node, raw)
        return _real[op](fd)

    def _listing(self, path: str) -> dict[str, Node | None]:
        out: dict[str, Node | None] = {}
        for name in os.listdir(path):
            try:
                st = os.lstat(os.path.join(path, name))
            except FileNotFoundError:
                continue
            out[name] = self._nodes.get((st.st_dev, st.st_ino))
        return out

    @staticmethod
    def _settle(node: Node, fd: int) -> None:
        # a descriptor opened write-only cannot be read: read through a read-only one
        fd = _real["open"](f"/proc/self/fd/{fd}", os.O_RDONLY)
        try:
            StrictDisk._settle_from(node, fd)
        finally:
            os.close(fd)

    @staticmethod
    def _settle_from(node: Node, fd: int) -> None:
        size = os.fstat(fd).st_size
        if node.whole:
            image = bytearray(os.pread(fd, size, 0))
        else:
            image = node.durable
            keep = min(len(image), size, size if node.cut_to is None else node.cut_to)
            del image[keep:]
            image.extend(bytes(size - keep))
            for offset, length in node.dirty:
                stop = min(offset + length, size)
                if stop > offset:
                    image[offset:stop] = os.pread(fd, stop - offset, offset)
        node.durable = image
        node.dirty, node.cut_to, node.whole = [], None, False

    def _rename(self, src, dst, **kw):
        return self._move("rename", src, dst, **kw)

    def _replace(self, src, dst, **kw):
        return self._move("replace", src, dst, **kw)

    def _move(self, op: str, src, dst, **kw):
        s, d = self._scoped(src), self._scoped(dst)
        if s is None and d is None:
            return _real[op](src, dst, **kw)
        self._event(op, d)
        result = _real[op](src, dst, **kw)
        with self._lock:
            for node in self._nodes.values():
                if node.path == s:
                    node.path = d
                elif node.path is not None and s is not None and node.path.startswith(s + os.sep):
                    node.path = d + node.path[len(s):]
                elif node.path == d:
                    node.path = None  # replaced: only a durable listing may still name it
        return result

    def _unlink(self, path, *, dir_fd=None):
        return self._remove_name("unlink", path, dir_fd)

    def _remove(self, path, *, dir_fd=None):
        return self._remove_name("remove", path, dir_fd)

    def _remove_name(self, op: str, path, dir_fd):
        p = self._scoped(path) if dir_fd is None else None
        if p is None:
            return _real[op](path, dir_fd=dir_fd)
        self._event(op, p)
        with self._lock:
            try:
                st = os.lstat(p)
                node = self._nodes.get((st.st_dev, st.st_ino))
            except FileNotFoundError:
                node = None
            result = _real[op](path)
            if node is not None:
                node.path = None
                del self._nodes[node.ino]  # the inode number may be reused; listings keep it
        return result

    def _mkdir(self, path, mode=0o777, *, dir_fd=None):
        p = self._scoped(path) if dir_fd is None else None
        if p is None:
            return _real["mkdir"](path, mode, dir_fd=dir_fd)
        self._event("mkdir", p)
        result = _real["mkdir"](path, mode)
        with self._lock:
            self._register(p, "dir")
        return result


class RdictProxy:
    """Stands in for the store's ``Rdict``: tells the model when a WAL sync was asked for."""

    def __init__(self, db: Any, disk: StrictDisk, path: str):
        self._db, self._disk, self._path = db, disk, path
        self._watched = disk.watches(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def write(self, batch: Any, options: Any = None) -> Any:
        if options is None or not options.sync or not self._watched:
            return self._db.write(batch) if options is None else self._db.write(batch, options)
        self._disk.mark("sync-write", self._path)
        result = self._db.write(batch, options)  # under the store's lock: no other writer
        self._disk.wal_synced(self._disk.wal_sync_requested(self._path))
        return result

    def flush_wal(self, sync: bool = False) -> Any:
        seen = sync and self._watched
        before = self._disk.wal_sync_requested(self._path) if seen else None
        if seen:
            self._disk.mark("flush_wal", self._path)
        result = self._db.flush_wal(sync)
        if before is not None:
            self._disk.wal_synced(before)
            self._disk.mark("wal-synced", self._path)  # a cut here: just after the sync
        return result


def _rdict_factory(real: Any, disk: StrictDisk):
    class SpiedRdict:
        repair = staticmethod(real.repair)

        def __new__(cls, path, *args, **kwargs):
            return RdictProxy(real(path, *args, **kwargs), disk, os.path.abspath(path))
    return SpiedRdict


def _copy_sparse(source: Path, target: Path) -> None:
    with _real_open(source, "rb") as src, _real_open(target, "wb") as out:
        while True:
            chunk = src.read(_CHUNK)
            if not chunk:
                break
            if chunk.count(0) == len(chunk):
                out.seek(len(chunk), os.SEEK_CUR)  # keep the hole a hole
            else:
                out.write(chunk)
        out.truncate()


__all__ = ["StrictDisk", "Event", "TakenCut", "RdictProxy"]
