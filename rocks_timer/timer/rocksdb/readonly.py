"""A RocksDB timer store opened for reading only (``rtimer check``, ``rtimer set-aside list`` and
``export`` when no broker runs): the same invariants as ``maint.check`` and the set-aside list,
without a byte of the store changing.

Why a shadow directory: RocksDB's read-only open writes nothing, but rocksdict 0.3.29 rewrites
its ``rocksdict-config.json`` beside the database on every open, read-only included (fixed
upstream after that release: rocksdict PR #186). So the database is opened through a private
temporary directory of symbolic links to the store's files, without that one; whatever an
open writes lands there and is removed on close. Value segments are read through ``O_RDONLY``
descriptors (``setaside.SegmentReader``). Nothing here takes the store's LOCK: the caller holds
the data dir's lock (shared) so no broker starts meanwhile.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from rocksdict import AccessType, Options, ReadOptions, Rdict

from rocks_timer.errors import CorruptRecordError
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb import keyindex
from rocks_timer.timer.rocksdb import setaside
from rocks_timer.timer.rocksdb.duecount import DueCounters
from rocks_timer.timer.rocksdb.topiccount import read_stored
from rocks_timer.timer.rocksdb.vlog.liveness import SEGMENT, Segment, liveness_problems
from rocks_timer.timer.rocksdb.meta import StoredState
from rocks_timer.timer.rocksdb.opening import CORRUPT_CF, META_CF, TIMER_CF
from rocks_timer.timer.rocksdb.scan import check_iterator
from rocks_timer.timer.values import decode_value

ROCKSDICT_CONFIG = "rocksdict-config.json"
_STATE = [K.META_CURSOR, K.META_CORRUPT, K.META_RECONCILE_OFFSET, K.META_LAYOUT,
          K.META_INDEX_COMPACTION, K.META_META_COMPACTION]


class ReadOnlyRocksStore:
    """Owns one read-only open of a RocksDB timer store directory."""

    name = "rocksdb"

    def __init__(self, path: Path):
        self.path = Path(path)
        self._shadow = Path(tempfile.mkdtemp(prefix="rtimer-ro-"))
        self._db: Rdict | None = None
        try:
            for entry in os.listdir(self.path):
                if entry != ROCKSDICT_CONFIG:
                    os.symlink(self.path / entry, self._shadow / entry)
            families = [n for n in Rdict.list_cf(str(self._shadow)) if n != "default"]
            self._db = Rdict(str(self._shadow), Options(raw_mode=True),
                             column_families={n: Options(raw_mode=True) for n in families},
                             access_type=AccessType.read_only())
            self._families = families
            meta = self._family(META_CF)
            stored = dict(zip(_STATE, (None if v is None else bytes(v)
                                       for v in meta.get(_STATE)))) if meta is not None else {}
            # the pending count: the topic counters' sum at the current key index version
            pending = keyindex.stored_pending(meta) if meta is not None else 0
            del meta
            self.state = replace(StoredState.parse(stored), pending=pending)
        except Exception as exc:
            self.close()
            if isinstance(exc, CorruptRecordError):
                raise
            raise CorruptRecordError(f"timer store {self.path} cannot be opened read-only: "
                                     f"{exc}", where=str(self.path)) from None
        self.layout = self.state.layout

    def _family(self, name: str) -> Any:
        return self._db.get_column_family(name) if name in self._families else None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        shutil.rmtree(self._shadow, ignore_errors=True)

    def __enter__(self) -> "ReadOnlyRocksStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- what check_view asks ------------------------------------------------------------------
    def reconcile_from(self) -> int | None:
        return self.state.reconcile_offset

    def pending_count(self) -> int:
        return self.state.pending

    def set_aside(self) -> list[setaside.Examined]:
        corrupt = self._family(CORRUPT_CF)
        if corrupt is None:
            return []
        rows = setaside.read_rows(corrupt)
        del corrupt
        reader = setaside.SegmentReader(self.path / "vlog") if self.layout == "vlog" else None
        try:
            return [setaside.examine(raw, value, reader) for raw, value in rows]
        finally:
            if reader is not None:
                reader.close()

    def check(self) -> dict[str, Any]:
        """``maint.check`` on the read-only open: the pending counter is exact, no key lies
        below the cursor, every value decodes (vlog: its record checks out and holds its key),
        liveness rows equal what the index points at, the key index and due counters match."""
        problems: list[str] = []
        live = undecodable = 0
        vlog = self.layout == "vlog"
        reader = setaside.SegmentReader(self.path / "vlog") if vlog else None
        seen: dict[int, list[int]] = {}
        expected: set[bytes] = set()
        raws: list[bytes] = []
        cursor = self.state.cursor
        timer = self._family(TIMER_CF)
        it = timer.iter(ReadOptions())
        try:
            it.seek_to_first()
            while it.valid():
                raw, value = bytes(it.key()), bytes(it.value())
                live += 1
                raws.append(raw)
                if cursor and raw < cursor:
                    problems.append(f"key {raw.hex()} lies below the cursor {cursor.hex()}")
                try:
                    pointer = I.pointer_or_none(value) if vlog else None
                    if pointer is not None:
                        entry = seen.setdefault(pointer.segment, [0, 0])
                        entry[0] += 1
                        entry[1] += pointer.length
                        value = reader.value(raw, pointer)
                    message = decode_value(raw, value)
                    expected.update(K.index_entry(raw, key)
                                    for key in keyindex.message_keys(message))
                except CorruptRecordError as exc:
                    undecodable += 1
                    problems.append(f"{setaside.name_key(raw)}: {exc}")
                it.next()
            check_iterator(it, f"timer store {self.path} check")
        finally:
            del it, timer
            if reader is not None:
                reader.close()
        if vlog:
            corrupt = self._family(CORRUPT_CF)
            if corrupt is not None:
                setaside.count_pointers(seen, setaside.read_rows(corrupt))
            del corrupt
            problems += self._check_liveness(seen)
        meta = self._family(META_CF)
        try:
            # a store at an older key index version has no topic counters yet (its next open
            # writes them): only the due counters are compared there
            version = meta.get(K.META_KEY_INDEX)
            topics = read_stored(meta) if version is not None and \
                bytes(version) in K.TOPIC_COUNTED_KEY_INDEX_VERSIONS else None
            problems += keyindex.check_index(meta, DueCounters(meta, None).stored(), topics,
                                             self.state.corrupt, self.path, expected, raws)
        finally:
            del meta
        if live != self.state.pending:
            problems.append(f"pending counter {self.state.pending} but {live} keys in the "
                            "timer CF")
        return {"engine": self.name, "layout": self.layout, "live_keys": live,
                "pending": self.state.pending, "undecodable": undecodable, "in_flight": 0,
                "read_only": True, "problems": problems}

    def _check_liveness(self, seen: dict[int, list[int]]) -> list[str]:
        problems = []
        meta = self._family(META_CF)
        it = meta.iter(ReadOptions())
        rows: dict[int, Segment] = {}
        try:
            it.seek(K.META_VLOG_SEGMENT_PREFIX)
            while it.valid() and bytes(it.key()).startswith(K.META_VLOG_SEGMENT_PREFIX):
                seg_id, value = K.segment_id_of(bytes(it.key())), bytes(it.value())
                if seg_id is None or len(value) != SEGMENT.size:
                    problems.append(f"vlog liveness row {bytes(it.key())!r} is malformed")
                else:
                    rows[seg_id] = Segment(seg_id, *SEGMENT.unpack(value))
                it.next()
            check_iterator(it, f"vlog liveness rows of {self.path}")
        finally:
            del it, meta
        problems.extend(liveness_problems(rows, seen))
        return problems

