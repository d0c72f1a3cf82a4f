"""The liveness table of the ``vlog`` layout's value segments (ARCHITECTURE §8): a segment's row
(``Segment``, stored as ``SEGMENT`` in ``meta`` under ``vlog.seg.<id>``), the changes a
WriteBatch makes to the rows (``Changes``), and the delay classes that decide which arrival
segment a body goes to (:mod:`rocks_timer.timer.rocksdb.vlog` owns the files and the table).
"""
from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from typing import Any

from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.vlog import segments as S

# kind, due day, created ms, live count, live bytes, end, latest due ms of any record written
SEGMENT = struct.Struct(">BqqQQQQ")
ARRIVAL, LONG = 0, 1
DAY_MS = 86_400_000
CLASS_FACTOR = 1.5
# upper bound (ms, exclusive) of each delay class; class 0 holds delays under 1.5 s
CLASS_BOUNDS = [int(1000 * CLASS_FACTOR ** (c + 1)) for c in range(64)]
MIN_SEAL_AGE_MS = 1_000


def delay_class(delay_ms: int) -> int:
    """The arrival class of a body due ``delay_ms`` after its send."""
    return bisect.bisect_right(CLASS_BOUNDS, delay_ms)


def class_low_ms(cls: int) -> int:
    """The shortest delay of class ``cls``."""
    return CLASS_BOUNDS[cls - 1] if cls > 0 else 0


def seal_age_ms(cls: int) -> int:
    """How long an arrival segment of class ``cls`` stays open at most."""
    return max(MIN_SEAL_AGE_MS, class_low_ms(cls) // 4)


@dataclass(slots=True)
class Segment:
    """One segment's row of the liveness table, and its open file."""

    id: int
    kind: int
    day: int  # long segments: the due day; arrival segments: the delay class
    created_ms: int
    live_count: int
    live_bytes: int
    end: int
    max_due_ms: int = 0
    file: S.SegmentFile | None = None
    busy: int = 0  # relocations using it (as source or target): not released meanwhile



class Changes(dict):
    """Segment id → [count delta, bytes delta] collected while a batch is built."""

    def add(self, segment: int, count: int, nbytes: int) -> None:
        entry = self.get(segment)
        if entry is None:
            self[segment] = [count, nbytes]
        else:
            entry[0] += count
            entry[1] += nbytes

    def keep(self, pointer_value: bytes) -> None:
        """A pointer enters the index (schedule, relocation target)."""
        seg, _, length = I.POINTER.unpack_from(pointer_value)[1:4]
        self.add(seg, 1, length)

    def orphan(self, segment: int, offset: int) -> None:
        """A record written but never indexed (a relocation copy of a record that changed
        meanwhile): no count changes, but it gets a removal record, or a rebuild would
        resurrect it once its original is removed."""
        dead = self.__dict__.setdefault("dead", {})
        dead.setdefault(segment, []).append(offset)

    def drop(self, pointer_value: bytes) -> None:
        """A live pointer leaves the index (delete, overwrite, relocation source); its record
        gets a removal record (``ValueLog.stage``)."""
        seg, offset, length = I.POINTER.unpack_from(pointer_value)[1:4]
        self.add(seg, -1, -length)
        dead = self.__dict__.setdefault("dead", {})
        dead.setdefault(seg, []).append(offset)


    def removed(self, index_values) -> None:
        """Give the records the pointers among ``index_values`` name removal records (their
        counts were taken out already, by ``drop_pointers``)."""
        dead = self.__dict__.setdefault("dead", {})
        unpack, size, version = I.POINTER.unpack_from, I.SIZE, I.POINTER_VERSION
        for value in index_values:
            if value is not None and len(value) >= size and value[0] == version:
                _, seg, offset = unpack(value)[:3]
                dead.setdefault(seg, []).append(offset)


def durable_rows(meta: Any, segs: list[Segment]) -> dict[int, bytes | None]:
    keys = [K.segment_meta_key(s.id) for s in segs]
    return {s.id: (None if v is None else bytes(v)) for s, v in zip(segs, meta.get(keys))}


def day_of(due_ms: int) -> int:
    return due_ms // DAY_MS


def liveness_problems(rows: "dict[int, Segment]", seen: dict[int, tuple[int, int]]) -> list[str]:
    """What ``check`` says when the liveness rows (segment id -> Segment) and the pointers the
    index holds (``seen``: segment id -> (records, bytes), set-aside rows included) disagree:
    the live check and the read-only check compare the same two things. Empties ``seen``."""
    problems = []
    for seg_id, seg in rows.items():
        count, nbytes = seen.pop(seg_id, (0, 0))
        if (count, nbytes) != (seg.live_count, seg.live_bytes):
            problems.append(f"vlog segment {seg_id}: liveness row says {seg.live_count} "
                            f"records / {seg.live_bytes} bytes, the index points at "
                            f"{count} / {nbytes}")
    for seg_id, (count, _) in seen.items():
        problems.append(f"{count} index entries point into vlog segment {seg_id}, "
                        f"which has no liveness row")
    return problems
