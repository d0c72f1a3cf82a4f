"""Relocation of sparse value segments and release of empty ones: the value log's garbage
collection, done through :class:`IndexSide` (the store implements it), so this package knows
nothing of the store.

- **Release**: a sealed segment with no live record is deleted after the index's WAL is synced
  (its zero count is durable) and the row read back from RocksDB confirms it. The index's lock
  is held only to pick, detach and forget segments: the WAL sync and the file deletions (a few
  ms each) never stall a claim or a send.
- **Relocation** (once per body at most): a sealed *arrival* segment whose live fraction fell
  below θ (``vlog_reclaim_live_pct``) or that is older than A (``vlog_reclaim_age_sec``), and
  that would otherwise stay pinned for more than ``vlog_reclaim_min_pinned_sec`` *and* at least
  as long again as it has lived (its latest due time is that far ahead: a segment near the end
  of its life, or of short delays, empties by itself soon, so moving it only costs writes; with
  delay classes this is the usual case, and relocation is left for segments emptied early, by
  cancels) has its live records copied, in due order, into the *long* segment of their due
  day, fdatasync'd, and re-pointed in one index transaction per piece; the old segment is then
  empty and released. Long segments are never relocated: they die with their day.

A relocation holds the index's lock only to read and to re-point, never while it copies bytes.
A record that changed meanwhile (cancelled, claimed, delivered, re-sent) is not re-pointed: its
copy is dead (it gets a removal record).
"""
from __future__ import annotations

import logging
import threading
from itertools import groupby
from typing import Any, Protocol

from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.vlog.liveness import ARRIVAL, Segment, day_of
from rocks_timer.timer.rocksdb.vlog.segments import iter_records
from rocks_timer.timer.rocksdb.vlog.valuelog import ValueLog

log = logging.getLogger(__name__)
PIECE_BYTES = 4 << 20  # live bytes re-pointed per transaction


class IndexSide(Protocol):
    """What the value log's GC needs from the index that points into it."""

    lock: threading.Lock  # the index's lock: held to read and to re-point

    def closed(self) -> bool: ...

    def check_open(self) -> None:
        """StoreClosedError once the index is closed (lock held)."""

    def index_values(self, keys: list[bytes]) -> list[bytes | None]:
        """The index value of each key now; None when it is gone or being delivered (lock
        held)."""

    def repoint(self, target: int, moves: list[tuple[bytes, bytes, bytes]],
                orphans: list[int]) -> None:
        """In one atomic index write (lock held): point each key of ``moves`` (key, value
        seen, new value) at its copy in segment ``target``; the copies at ``orphans`` are dead
        (their records changed meanwhile)."""

    def make_durable(self) -> None:
        """Sync the segments appended to, then the index's WAL (no lock held)."""

    def durable_rows(self, segs: list[Segment]) -> dict[int, bytes | None]:
        """The liveness rows of ``segs`` as RocksDB has them now."""

    def forget(self, segs: list[Segment]) -> int:
        """Delete the rows of released segments in one index write (lock held); returns the
        bytes freed."""


def release_empty(vlog: ValueLog, side: IndexSide) -> int:
    """Delete sealed segments with no live record; returns the bytes freed. A crash after an
    unlink and before the row's delete leaves a row with no live record and no file, which
    the next release forgets (``ValueLog._open_file``)."""
    with side.lock:
        side.check_open()
        segs = vlog.releasable()
        for seg in segs:
            seg.busy += 1
    if not segs:
        return 0
    rows = None
    try:
        # every batch that emptied them is durable before a file goes; values first, so the
        # WAL sync never makes an index entry durable ahead of the bytes it points at
        side.make_durable()
        rows = side.durable_rows(segs)
    finally:
        with side.lock:
            for seg in segs:
                seg.busy -= 1
            gone = vlog.detach(segs, rows) if rows is not None and not side.closed() else []
    vlog.unlink(gone)  # and their names are gone for good before the rows are
    if not gone:
        return 0
    with side.lock:
        side.check_open()
        return side.forget(gone)


def candidates(vlog: ValueLog, config: Any, now_ms: int) -> list[Segment]:
    """Sealed arrival segments below θ or older than A (call with the index's lock)."""
    theta, age_ms = config.vlog_reclaim_live_pct, config.vlog_reclaim_age_sec * 1000
    horizon_ms = now_ms + config.vlog_reclaim_min_pinned_sec * 1000
    out = []
    for seg in vlog.segments.values():
        if seg.kind != ARRIVAL or seg.busy or seg.file is None or not seg.live_count:
            continue
        if not vlog.is_sealed(seg) or seg.max_due_ms <= horizon_ms:
            continue  # open, or empty soon anyway: moving its records would only cost writes
        if seg.max_due_ms - now_ms < now_ms - seg.created_ms:
            continue  # past the middle of its life: the space it would free is the lesser part
        sparse = theta and seg.live_bytes * 100 < theta * seg.end
        old = age_ms and now_ms - seg.created_ms >= age_ms
        if sparse or old:
            out.append(seg)
    return out


def pick(vlog: ValueLog, side: IndexSide, config: Any, now_ms: int) -> list[Segment]:
    """The candidates, marked busy (no release or other relocation takes them)."""
    with side.lock:
        if side.closed():
            return []
        todo = candidates(vlog, config, now_ms)
        for seg in todo:
            seg.busy += 1
    return todo


def relocate_all(vlog: ValueLog, side: IndexSide, segs: list[Segment], now_ms: int) -> int:
    """Relocate ``segs`` (picked by :func:`pick`) and un-busy them; returns records moved."""
    moved = 0
    try:
        for seg in segs:
            moved += relocate_segment(vlog, side, seg, now_ms)
    finally:
        for seg in segs:
            seg.busy -= 1
    return moved


def relocate(vlog: ValueLog, side: IndexSide, config: Any, now_ms: int) -> dict[str, Any]:
    """Relocate every candidate segment now, in the caller, and release the empty ones."""
    with side.lock:
        side.check_open()
    todo = pick(vlog, side, config, now_ms)
    moved = relocate_all(vlog, side, todo, now_ms)
    freed = release_empty(vlog, side)
    return {"segments": len(todo), "relocated_records": moved, "released_bytes": freed}


def relocate_segment(vlog: ValueLog, side: IndexSide, seg: Segment, now_ms: int) -> int:
    """Move the live records of ``seg`` into long segments; returns how many moved."""
    damaged: list[tuple[int, str]] = []
    moved, piece, size = 0, [], 0
    for record in iter_records(seg.file, seg.end, damaged):
        if not record[1]:
            continue  # a removal record: it dies with this segment
        piece.append(record)
        size += record[3]
        if size >= PIECE_BYTES:
            moved += _move_piece(vlog, side, seg, piece, now_ms)
            piece, size = [], 0
    if piece:
        moved += _move_piece(vlog, side, seg, piece, now_ms)
    for offset, reason in damaged:
        log.error("%s: relocation of segment %d met a damaged record at %d: %s (its index "
                  "entry stays; it is set aside when due)", vlog.dir, seg.id, offset, reason)
    return moved


def _move_piece(vlog: ValueLog, side: IndexSide, seg: Segment, piece: list,
                now_ms: int) -> int:
    with side.lock:
        side.check_open()
        current = side.index_values([rec[1] for rec in piece])
    live = []
    for (offset, key, value, length), index_value in zip(piece, current):
        if index_value is None:
            continue
        if I.pointer_or_none(index_value) == (seg.id, offset, length):
            live.append((key, value, bytes(index_value)))
    if not live:
        return 0
    live.sort()  # key order = due order
    moved = 0
    today = day_of(now_ms)  # a body already due goes to today's segment, not a past day's
    for day, group in groupby(live, key=lambda item: max(today, day_of(K.key_due_ms(item[0])))):
        group = list(group)
        target, offsets = vlog.append_long(day, [(k, v) for k, v, _ in group], now_ms)
        try:
            moved += _repoint(side, target, group, offsets)
        finally:
            target.busy -= 1
    return moved


def _repoint(side: IndexSide, target: Segment, group: list, offsets: list[int]) -> int:
    """Point the index at the copies in ``target``, for the records unchanged since read."""
    with side.lock:
        side.check_open()
        now_values = side.index_values([k for k, _, _ in group])
        moves, orphans = [], []
        for (key, _, seen), offset, now_value in zip(group, offsets, now_values):
            if now_value is None or bytes(now_value) != seen:
                orphans.append(offset)  # changed while we copied: the copy is dead
                continue
            moves.append((key, seen, I.repoint(seen, target.id, offset)))
        side.repoint(target.id, moves, orphans)
    return len(moves)
