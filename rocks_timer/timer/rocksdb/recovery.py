"""``rtimer repair`` for the RocksDB timer store (ARCHITECTURE §9, issue 30).

What it does, in order:

1. **Finishes an interrupted repair.** A repair builds its result in ``<store>.rebuild/`` and
   writes ``REBUILD-COMPLETE`` there once the result is whole; the switch then renames the old
   store to ``<store>.before-repair-<n>`` and the result into place. A ``kill -9`` anywhere
   leaves either the old store untouched (the partial result is discarded and built again) or
   a complete result that the next ``repair`` switches in: never an empty store.
2. **Tells the disk refusing from damage.** No space, no permission, a read-only file system:
   ``StoreIOError``, nothing changed (issue 30: a repair on a full disk broke the store).
3. **Leaves a healthy store alone.** A store that opens (after a crash RocksDB replays its WAL)
   and passes its invariant check is not touched: RocksDB's own repair, run without the store's
   column families, used to delete every message whose index entry was still in the WAL.
4. **Builds beside.** The RocksDB files are copied (tables linked) into ``<store>.rebuild/salvage``
   and opened there: strictly, else with WAL recovery that skips damaged records (only there: a
   normal open refuses them); if ``CURRENT`` is gone the newest ``MANIFEST`` is named, if the
   manifest is unreadable RocksDB's repairer rebuilds the copy's. What can be read of ``meta``
   and of the index is read, each on its own. In the ``vlog`` layout the index is then rebuilt
   from the value segments (linked, never copied or changed): every record holds its key,
   removal records say which left the index and void records which were never in it
   (segments.py), keys below the salvaged cursor are delivered for good, and the CommitLog's
   stamped delivered copies are reconciled again on the next open (the reconcile offset
   restarts at 0). In the ``inline`` layout the salvaged index is streamed into a new store.
5. **Names what it could not recover**: index entries whose record is gone, and in ``inline``
   the timer puts readable in the raw WAL that the salvage lacks (``walscan``), by msg_id, topic,
   keys and due time; a count where nothing can be named (a damaged table of an ``inline``
   store). ``RepairReport.lost_any`` makes the command exit non-zero.

The old store is kept as evidence (``before-repair-<n>``); its segments share their files
with the new store (hard links), so keeping it costs only the index's size.
"""
from __future__ import annotations

import errno
import gc
import logging
import os
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocksdict import AccessType, DBRecoveryMode, Options, Rdict, ReadOptions

from rocks_timer.config import BrokerConfig
from rocks_timer.errors import (CorruptRecordError, RocksTimerError, StoreIOError,
                                StoreLockedError)
from rocks_timer.fileio import fsync_dir
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.keyindex import stored_pending
from rocks_timer.timer.rocksdb.vlog import segments as S
from rocks_timer.timer.rocksdb.vlog.liveness import ARRIVAL, SEGMENT
from rocks_timer.timer.rocksdb.opening import META_CF, TIMER_CF, rocks_error
from rocks_timer.timer.rocksdb.vlog.valuelog import CURSOR_FILE
from rocks_timer.timer.rocksdb.walscan import WalScan
from rocks_timer.timer.values import decode_value, peek_value

log = logging.getLogger(__name__)
# the recovery campaign kills a real ``rtimer repair`` at each of these points (SIGKILL to
# itself when the variable names the point): tests/faults/test_recovery_campaign.py
KILL_AT_ENV = "RTIMER_REPAIR_KILL_AT"
KILL_POINTS = ("copied", "salvaged", "built", "complete", "old-moved", "switched")


def _point(name: str) -> None:
    if os.environ.get(KILL_AT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)

COMPLETE = "REBUILD-COMPLETE"
_IO_ERRNOS = {errno.ENOSPC, errno.EACCES, errno.EPERM, errno.EROFS, errno.EDQUOT, errno.EIO,
              errno.EMFILE}
_LINKED = (".sst", ".blob")


@dataclass
class LostMessage:
    """A message an acknowledged send stored that the repair could not bring back."""

    msg_id: str
    topic: str
    due_ms: int
    keys: list[str]
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"msg_id": self.msg_id, "topic": self.topic, "due_ms": self.due_ms,
                "keys": self.keys, "reason": self.reason}


@dataclass
class RepairReport:
    path: str
    action: str  # "none" (healthy), "rebuilt", "created-empty"
    layout: str = "?"
    recovered: int = 0
    lost: list[LostMessage] = field(default_factory=list)
    lost_unnamed: int = 0  # counted (from the pending counter) but unreadable
    kept_as: str | None = None
    notes: list[str] = field(default_factory=list)
    check: dict[str, Any] = field(default_factory=dict)

    @property
    def lost_any(self) -> bool:
        return bool(self.lost or self.lost_unnamed or self.check.get("problems"))

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "action": self.action, "layout": self.layout,
                "recovered": self.recovered, "lost": [m.as_dict() for m in self.lost],
                "lost_unnamed": self.lost_unnamed, "kept_as": self.kept_as,
                "notes": self.notes, "problems": list(self.check.get("problems", [])),
                "live_keys": self.check.get("live_keys", 0),
                "undecodable": self.check.get("undecodable", 0), "ok": not self.lost_any}


@dataclass
class Salvage:
    """What could be read of the old RocksDB files."""

    opened: bool = False
    layout: str | None = None
    cursor: bytes = b""
    pending: int | None = None
    next_id: int = 1
    rows: dict[int, tuple] = field(default_factory=dict)
    index: dict[bytes, bytes] = field(default_factory=dict)
    index_complete: bool = True
    keys: dict[bytes, list[str]] = field(default_factory=dict)  # timer key -> its KEYS (meta)
    counters: dict[bytes, bytes] = field(default_factory=dict)  # the vlog's figures, kept
    rebuilt_manifest: bool = False  # RocksDB's repair had to make the copy openable
    wal_clean: bool = False  # the copy opened without skipping a WAL record: its rows' ends
    # are exact, so value-segment bytes past them were never indexed (never acknowledged)
    notes: list[str] = field(default_factory=list)


class StoreRepair:
    """Repairs the timer store directory ``path`` (the store must not be open anywhere).
    Receives the store class it opens results with and the configuration; owns the directories
    ``<path>.rebuild`` and ``<path>.before-repair-<n>``."""

    def __init__(self, store_cls: Any, path: Path, config: BrokerConfig,
                 data_dir_in_use: bool = False, rebuild: bool = False) -> None:
        self.store_cls = store_cls
        self.path = Path(path)
        self.config = config
        self.data_dir_in_use = data_dir_in_use  # engine record says rocksdb: the store existed
        self.force = rebuild  # rebuild even a healthy store (``rtimer repair --rebuild``)
        self.beside = self.path.with_name(self.path.name + ".rebuild")
        self.report = RepairReport(str(self.path), "none")

    # -- entry point ---------------------------------------------------------------------
    def run(self) -> RepairReport:
        try:
            return self._run()
        except OSError as exc:
            if exc.errno in _IO_ERRNOS:
                raise StoreIOError(
                    f"repair of {self.path} stopped: {exc.strerror} ({exc.filename or ''}); "
                    f"this is the disk refusing, not damage: nothing was switched, the store "
                    f"is as it was; free space or fix the permissions and run `rtimer repair` "
                    f"again", errno=exc.errno) from None
            raise

    def _run(self) -> RepairReport:
        self._finish_interrupted()
        self._preflight()
        if not self.path.is_dir() or not any(self.path.iterdir()):
            return self._create_empty()
        healthy = None if self.force else self._healthy()
        if healthy is not None:
            return healthy
        self._rebuild()
        self._switch()
        return self._verify()

    # -- 1. an interrupted repair ----------------------------------------------------------
    def _finish_interrupted(self) -> None:
        if not self.beside.exists():
            return
        if (self.beside / COMPLETE).exists():
            self.report.notes.append(f"finished an interrupted repair ({self.beside})")
            self._switch()
        else:
            self.report.notes.append(f"discarded the partial result of an interrupted repair "
                                     f"({self.beside}); the store it started from is intact")
            shutil.rmtree(self.beside)
            fsync_dir(self.beside.parent)

    # -- 2. the disk refusing --------------------------------------------------------------
    def _preflight(self) -> None:
        parent = self.path.parent
        if not os.access(parent, os.W_OK | os.X_OK):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(parent))
        if self.path.is_dir():
            for root, dirs, files in os.walk(self.path):
                if not os.access(root, os.R_OK | os.X_OK):
                    raise OSError(errno.EACCES, os.strerror(errno.EACCES), root)
                for name in files:
                    file = os.path.join(root, name)
                    if name != "LOCK" and not os.access(file, os.R_OK):
                        raise OSError(errno.EACCES, os.strerror(errno.EACCES), file)
            need = sum(f.stat().st_size for f in self.path.iterdir() if f.is_file()
                       and not f.name.endswith(_LINKED)) + (1 << 20)
            free = shutil.disk_usage(parent).free
            if free < need:
                raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: {free} bytes free, "
                              f"the repair needs about {need}", str(parent))

    # -- 3. a healthy store ----------------------------------------------------------------
    def _healthy(self) -> RepairReport | None:
        try:
            with self.store_cls.open(self.path, self.config) as store:
                check = store.check()
                self.report.layout = store.layout
        except (StoreIOError, StoreLockedError):
            raise
        except Exception as exc:  # noqa: BLE001 - rocksdict raises plain Exception
            error = exc if isinstance(exc, RocksTimerError) else rocks_error(self.path, str(exc))
            failed = (type(error), str(error))
            del error  # its context's traceback holds an iterator, which holds RocksDB's LOCK
        else:
            failed = None
        if failed is not None:
            gc.collect()  # so the next open of this directory (or of the result) is not "in use"
            kind, text = failed
            if kind is StoreLockedError:
                raise StoreLockedError(text)
            if kind is StoreIOError:
                raise StoreIOError(text)
            self.report.notes.append(f"the store does not open or read cleanly: {text}")
            return None
        if check["problems"]:
            self.report.notes.append(f"the store opens but its check finds "
                                     f"{len(check['problems'])} problem(s): rebuilding")
            return None
        self.report.check = check
        self.report.recovered = check.get("live_keys", 0)
        self.report.notes.append("the store opens and every invariant holds: nothing to repair "
                                 "(nothing was changed)")
        return self.report

    def _create_empty(self) -> RepairReport:
        """The store directory is gone: nothing to rebuild from. An empty store is made so the
        data dir opens again, and the report says everything pending is lost (count unknown)."""
        self.report.action = "created-empty"
        self.report.lost_unnamed = -1 if self.data_dir_in_use else 0
        if self.data_dir_in_use:
            self.report.notes.append(
                f"{self.path} is missing: every message it held is lost (how many is unknown; "
                f"restore the directory from a copy instead if you have one)")
        with self.store_cls.open(self.path, self.config) as store:
            self.report.layout = store.layout
            self.report.check = store.check()
        return self.report

    # -- 4. building beside ----------------------------------------------------------------
    def _rebuild(self) -> None:
        self.beside.mkdir(mode=0o700)
        fsync_dir(self.beside.parent)
        salvage_dir = self.beside / "salvage"
        salvage_dir.mkdir(mode=0o700)
        for entry in self.path.iterdir():
            if entry.is_file() and entry.name != "LOCK":
                target = salvage_dir / entry.name
                if entry.name.endswith(_LINKED):
                    os.link(entry, target)  # RocksDB never rewrites a table file in place
                else:
                    shutil.copyfile(entry, target)
        _point("copied")
        vlog_dir = self.path / "vlog"
        # a vlog store always has its vlog/ directory (made at its first open); an inline
        # index holds whole messages: streamed into the result later, never held in memory
        salvage = self._salvage(salvage_dir, keep_values=vlog_dir.is_dir())
        _point("salvaged")
        self.report.notes += salvage.notes
        layout = salvage.layout or ("vlog" if vlog_dir.is_dir() else "inline")
        self.report.layout = layout
        result = self.beside / "store"
        if layout == "vlog":
            shutil.rmtree(salvage_dir)  # read what it could; the index is rebuilt
            self._rebuild_vlog(salvage, vlog_dir, result)
        else:
            self._inline_result(salvage, salvage_dir, result)
        for root, dirs, files in os.walk(result):
            os.chmod(root, 0o700)
            for name in files:
                os.chmod(os.path.join(root, name), 0o600)
        _fsync_tree(result)
        _point("built")
        (self.beside / COMPLETE).write_bytes(b"")
        fd = os.open(self.beside / COMPLETE, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.beside)
        _point("complete")

    def _salvage(self, salvage_dir: Path, keep_values: bool) -> Salvage:
        found = Salvage()
        names = set(os.listdir(salvage_dir))
        manifests = sorted(n for n in names if n.startswith("MANIFEST-"))
        if "CURRENT" not in names and manifests:
            (salvage_dir / "CURRENT").write_text(manifests[-1] + "\n")
            found.notes.append(f"CURRENT was missing: named {manifests[-1]}")
        if not (salvage_dir / "CURRENT").exists():
            found.notes.append("no RocksDB entry point (CURRENT/MANIFEST): the old index is "
                               "unreadable")
            return found
        db = _open_salvage(salvage_dir, found)
        if db is None:
            return found
        found.opened = True
        try:
            self._salvage_meta(db, found)
        except Exception as exc:  # noqa: BLE001 - rocksdict raises plain Exception
            found.notes.append(f"the old meta column family is unreadable: {exc}")
        if keep_values:
            for key, value in _index_entries(db, found):
                found.index[key] = value
        db.close()
        return found

    @staticmethod
    def _salvage_meta(db: Rdict, found: Salvage) -> None:
        meta = db.get_column_family(META_CF)
        try:
            layout, cursor, pending, next_id, version = meta.get(
                [K.META_LAYOUT, K.META_CURSOR, K.META_PENDING, K.META_VLOG_NEXT_ID,
                 K.META_KEY_INDEX])
            found.layout = bytes(layout).decode() if layout is not None else None
            found.cursor = bytes(cursor) if cursor is not None else b""
            found.pending = int.from_bytes(bytes(pending), "big") if pending else None
            if version is not None and bytes(version) == K.KEY_INDEX_VERSION:
                # the key index's topic counters hold the pending count (no row of its own)
                found.pending = stored_pending(meta)
            found.next_id = int.from_bytes(bytes(next_id), "big") if next_id else 1
            found.counters = {name: bytes(value) for name, value in zip(
                K.META_VLOG_COUNTERS, meta.get(list(K.META_VLOG_COUNTERS))) if value is not None}
            it = meta.iter(ReadOptions())
            try:
                it.seek(K.META_KEY_INDEX_PREFIX)
                while it.valid() and bytes(it.key()).startswith(K.META_KEY_INDEX_PREFIX):
                    named = _key_of_entry(bytes(it.key()))
                    if named is not None:
                        found.keys.setdefault(named[0], []).append(named[1])
                    it.next()
                it.status()
                it.seek(K.META_VLOG_SEGMENT_PREFIX)
                while it.valid() and bytes(it.key()).startswith(K.META_VLOG_SEGMENT_PREFIX):
                    seg_id, value = K.segment_id_of(bytes(it.key())), bytes(it.value())
                    if seg_id is not None and len(value) == SEGMENT.size:
                        found.rows[seg_id] = SEGMENT.unpack(value)
                    it.next()
                it.status()
            finally:
                del it
        finally:
            del meta

    def _rebuild_vlog(self, salvage: Salvage, vlog_dir: Path, result: Path) -> None:
        ends = {seg_id: row[5] for seg_id, row in salvage.rows.items()} \
            if salvage.wal_clean else None
        if ends is None:
            self.report.notes.append("the index's segment ends are not known exactly: value "
                                     "records never indexed (sends or reschedules cut short by "
                                     "a crash) may be delivered")
        scan = SegmentScan(vlog_dir, ends)
        scan.run()
        self.report.notes += scan.notes
        cursor = salvage.cursor
        try:  # the delivery cursor kept beside the segments (vlog.write_cursor): it outlives meta
            kept = (vlog_dir / CURSOR_FILE).read_bytes()
        except FileNotFoundError:
            kept = b""
        if kept > cursor:
            cursor = kept
        entries: dict[bytes, bytes] = {}
        rows: dict[int, list] = {}
        for key, (seg_id, offset, length, info) in scan.live.items():
            if cursor and key < cursor:
                continue  # delivered for good (ARCHITECTURE §4: nothing pending below the cursor)
            if isinstance(info, str):
                self.report.lost.append(self._lost(salvage, key, None, f"its value-segment "
                                                   f"record does not decode: {info}"))
                continue
            entries[key] = I.encode_pointer(seg_id, offset, length, info.queue_id,
                                            info.body_size, info.tags)
            row = rows.setdefault(seg_id, [0, 0, 0])
            row[0] += 1
            row[1] += length
            row[2] = max(row[2], K.key_due_ms(key))
        for key, value in salvage.index.items():
            if key in entries or (cursor and key < cursor):
                continue
            if not I.is_pointer(value):
                entries[key] = value  # a small body kept in the index (vlog_inline_max_bytes)
                continue
            self.report.lost.append(self._lost(salvage, key, None, "its value-segment record "
                                               "is gone or damaged"))
        for key, reason in scan.damaged_keys:
            if key not in entries and (not cursor or key >= cursor) and not any(
                    m.msg_id == _msg_id(key) and m.due_ms == K.key_due_ms(key)
                    for m in self.report.lost):
                self.report.lost.append(self._lost(salvage, key, None, reason))
        if salvage.pending is not None and not salvage.index_complete:
            missing = salvage.pending - len(entries) - len(self.report.lost)
            if missing > 0:
                self.report.notes.append(
                    f"the old pending counter says {salvage.pending}; {len(entries)} were "
                    f"rebuilt (records without a removal record past the counter's time were "
                    f"sends not yet indexed)")
        # the new store: an empty one, the segments linked in, then the rebuilt index
        config = self.config.replace(rocksdb_layout="vlog")
        with self.store_cls.open(result, config):
            pass
        new_vlog = result / "vlog"
        new_vlog.mkdir(mode=0o700, exist_ok=True)
        for seg_id in scan.sizes:
            os.link(vlog_dir / S.segment_name(seg_id), new_vlog / S.segment_name(seg_id))
        seg_rows = {}
        for seg_id, size in scan.sizes.items():
            count, nbytes, max_due = rows.get(seg_id, (0, 0, 0))
            old = salvage.rows.get(seg_id)
            kind, day, created = (old[0], old[1], old[2]) if old else (
                ARRIVAL, 0, 0)  # created at 0: sealed, never appended to again
            seg_rows[seg_id] = SEGMENT.pack(kind, day, created, count, nbytes, size,
                                            max(max_due, old[6] if old else 0))
        next_id = max([salvage.next_id, *(i + 1 for i in scan.sizes)])
        with self.store_cls.open(result, config) as store:
            store.load_rebuilt(entries, seg_rows, next_id, cursor, salvage.counters)
        self.report.recovered = len(entries)

    def _inline_result(self, salvage: Salvage, salvage_dir: Path, result: Path) -> None:
        if not salvage.opened:
            raise CorruptRecordError(
                f"timer store {self.path} (inline layout) is unreadable: no RocksDB index could "
                f"be opened, and an inline store has no other record of its messages; restore "
                f"it from a copy", where=str(self.path))
        with self.store_cls.open(result, self.config.replace(rocksdb_layout="inline")) as store:
            db = _open_salvage(salvage_dir, Salvage())  # opened once already: replayed
            if db is None:
                raise CorruptRecordError(f"the salvaged copy {salvage_dir} no longer opens",
                                         where=str(salvage_dir))
            try:
                store.load_rebuilt(_index_entries(db, salvage, remember=salvage.index), {},
                                   None, salvage.cursor)
            finally:
                db.close()
        shutil.rmtree(salvage_dir)
        self.report.notes += [n for n in salvage.notes if n not in self.report.notes]
        wal = WalScan(sorted(self.path.glob("*.log")))
        wal.run()
        for key, value in wal.final_puts().items():
            if key in salvage.index or (salvage.cursor and key < salvage.cursor):
                continue
            self.report.lost.append(self._lost(salvage, key, value, "its WAL record is damaged"))
        named = {(m.msg_id, m.due_ms) for m in self.report.lost}
        for key in salvage.keys:  # the key index (in meta) outlived the entry itself
            if key in salvage.index or (salvage.cursor and key < salvage.cursor) or (
                    _msg_id(key), K.key_due_ms(key)) in named:
                continue
            self.report.lost.append(self._lost(salvage, key, None, "its index entry is "
                                               "unreadable (named from the key index)"))
        if salvage.pending is not None:
            gap = salvage.pending - len(salvage.index) - len(self.report.lost)
            if gap > 0 and not (salvage.index_complete and not salvage.rebuilt_manifest):
                self.report.lost_unnamed = gap
                self.report.notes.append(f"{gap} message(s) were in a damaged table file of "
                                         f"the index: their names are unreadable")
        self.report.recovered = len(salvage.index)

    @staticmethod
    def _lost(salvage: Salvage, key: bytes, value: bytes | None, reason: str) -> LostMessage:
        lost = _lost(key, value, reason)
        if not lost.keys:
            lost.keys = sorted(salvage.keys.get(key, []))
        return lost

    # -- the switch ------------------------------------------------------------------------
    def _switch(self) -> None:
        result = self.beside / "store"
        if result.exists():
            if self.path.exists():
                kept = _free_name(self.path)
                os.rename(self.path, kept)
                self.report.kept_as = str(kept)
                fsync_dir(self.path.parent)
                _point("old-moved")
            os.rename(result, self.path)
            fsync_dir(self.path.parent)
            _point("switched")
        shutil.rmtree(self.beside)
        fsync_dir(self.path.parent)
        self.report.action = "rebuilt"

    def _verify(self) -> RepairReport:
        with self.store_cls.open(self.path, self.config) as store:
            self.report.check = store.check()
            self.report.layout = store.layout
        return self.report


class SegmentScan:
    """Reads every value segment of a directory from its first byte to its last: the live
    records (no removal record names them; one per key), and the keys of damaged records
    where their key can still be read."""

    def __init__(self, vlog_dir: Path, ends: dict[int, int] | None = None) -> None:
        self.dir = vlog_dir
        self.ends = ends  # exact index ends of the segments (bytes past them: never indexed)
        # key -> (segment, offset, length, what scan lists, or why the value does not decode):
        # never the value itself, so memory holds pointers, not bodies
        self.live: dict[bytes, tuple[int, int, int, Any]] = {}
        self.sizes: dict[int, int] = {}
        self.damaged_keys: list[tuple[bytes, str]] = []
        self.notes: list[str] = []

    def run(self) -> None:
        if not self.dir.is_dir():
            return
        for file in sorted(self.dir.glob("*.vlog")):
            if not file.stem.isdigit():
                continue
            seg = S.SegmentFile(self.dir, int(file.stem))
            try:
                self._segment(seg)
            finally:
                seg.close()

    def _segment(self, seg: S.SegmentFile) -> None:
        self.sizes[seg.id] = seg.size
        damaged: list[tuple[int, str]] = []
        found, voids = [], []
        if self.ends is not None and seg.size > self.ends.get(seg.id, 0):
            # a segment without a row was made for a batch that never ran: all of it is void
            voids.append((self.ends.get(seg.id, 0), seg.size))
        for offset, key, value, length in S.iter_records(seg, seg.size, damaged):
            void = S.void_range(key, value)
            if void is not None:
                voids.append(void)
            else:
                found.append((offset, key, value, length))
        records, dead = [], set()
        for offset, key, value, length in found:
            if any(start <= offset < stop for start, stop in voids):
                continue  # never indexed: neither its record nor its removals count
            offsets = S.removal_offsets(key, value)
            if offsets is not None:
                dead.update(offsets)
            elif key:
                records.append((offset, key, value, length))
        for offset, key, value, length in records:
            if offset not in dead:
                # one copy per key: a relocation cut short leaves two identical ones
                if key not in self.live:
                    try:
                        info: Any = peek_value(key, value)
                    except CorruptRecordError as exc:
                        info = str(exc)
                    self.live[key] = (seg.id, offset, length, info)
        for offset, reason in damaged:
            key = _readable_key(seg, offset)
            if key is not None:
                self.damaged_keys.append((key, f"its value-segment record is damaged ({reason})"))
            else:
                self.notes.append(f"segment {seg.id}: {reason} (no key readable there)")


def _readable_key(seg: S.SegmentFile, offset: int) -> bytes | None:
    head = seg.read(offset, S.SIZE)
    if len(head) < S.SIZE or head[0] != S.MAGIC:
        return None
    key_len = int.from_bytes(head[1:3], "big")
    key = seg.read(offset + S.SIZE, key_len)
    try:
        K.decode_key(key)
    except RocksTimerError:
        return None
    return key


def _index_entries(db: Rdict, found: Salvage, remember: dict | None = None):
    """The readable (key, value) pairs of the salvaged index, in key order; a damaged table
    ends the walk (noted in ``found``). ``remember`` gets each key (membership only)."""
    n = 0
    try:
        timer = db.get_column_family(TIMER_CF)
        it = timer.iter(ReadOptions())
        try:
            it.seek_to_first()
            while it.valid():
                key = bytes(it.key())
                if remember is not None:
                    remember[key] = b""
                yield key, bytes(it.value())
                n += 1
                it.next()
            it.status()
        finally:
            del it, timer
    except Exception as exc:  # noqa: BLE001 - rocksdict raises plain Exception
        found.index_complete = False
        found.notes.append(f"the old index is readable only up to {n} entries: {exc}")


def _open_salvage(salvage_dir: Path, found: Salvage) -> Rdict | None:
    """The copy, opened with WAL recovery that skips damaged records (RocksDB writes what it
    replays into the copy; the original is never opened for writing)."""
    try:
        families = [n for n in Rdict.list_cf(str(salvage_dir)) if n != "default"]
    except Exception as exc:  # noqa: BLE001 - rocksdict raises plain Exception
        found.notes.append(f"the old RocksDB manifest is unreadable ({exc}): RocksDB's repair "
                           f"rebuilt the copy's manifest from its table files")
        try:  # on the copy only; what it cannot place is counted below, never trusted
            Rdict.repair(str(salvage_dir), Options(raw_mode=True))
            families = [n for n in Rdict.list_cf(str(salvage_dir)) if n != "default"]
            found.rebuilt_manifest = True
        except Exception as exc2:  # noqa: BLE001
            found.notes.append(f"RocksDB's repair of the copy failed too: {exc2}")
            return None
    strict = Options(raw_mode=True)
    strict.set_wal_recovery_mode(DBRecoveryMode.tolerate_corrupted_tail_records())
    try:
        db = Rdict(str(salvage_dir), strict,
                   column_families={n: Options(raw_mode=True) for n in families})
        found.wal_clean = not found.rebuilt_manifest
        return db
    except Exception:  # noqa: BLE001 - a damaged WAL record: skip it, on the copy
        pass
    options = Options(raw_mode=True)
    options.set_wal_recovery_mode(DBRecoveryMode.skip_any_corrupted_record())
    options.set_paranoid_checks(False)
    try:
        return Rdict(str(salvage_dir), options,
                     column_families={n: Options(raw_mode=True) for n in families})
    except Exception as exc:  # noqa: BLE001
        found.notes.append(f"the old RocksDB files do not open even skipping damaged WAL "
                           f"records: {exc}")
    try:
        return Rdict(str(salvage_dir), Options(raw_mode=True),
                     column_families={n: Options(raw_mode=True) for n in families},
                     access_type=AccessType.read_only())
    except Exception:  # noqa: BLE001
        return None


def _msg_id(key: bytes) -> str:
    return key[-16:].hex().upper()


def _key_of_entry(entry: bytes) -> tuple[bytes, str] | None:
    """(timer key, business key) of a key index entry; None for a malformed one."""
    try:
        raw = K.timer_key_of_entry(entry)
    except RocksTimerError:
        return None
    body = entry[len(K.META_KEY_INDEX_PREFIX):]
    topic_end = 1 + body[0]
    n = K.KEY_LEN.unpack_from(body, topic_end)[0]
    key = body[topic_end + K.KEY_LEN.size:topic_end + K.KEY_LEN.size + n]
    return raw, key.decode("utf-8", errors="replace")


def _lost(key: bytes, value: bytes | None, reason: str) -> LostMessage:
    try:
        parsed = K.decode_key(key)
        topic, due = parsed.topic, parsed.due_ms
    except RocksTimerError:
        topic, due = "?", K.key_due_ms(key) if len(key) >= 8 else 0
    keys: list[str] = []
    if value is not None:
        try:
            keys = list(decode_value(key, value).keys)
        except (RocksTimerError, ValueError):
            pass
    return LostMessage(_msg_id(key), topic, due, keys, reason)


def _free_name(path: Path) -> Path:
    n = 1
    while True:
        kept = path.with_name(f"{path.name}.before-repair-{n}")
        if not kept.exists():
            return kept
        n += 1


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))
