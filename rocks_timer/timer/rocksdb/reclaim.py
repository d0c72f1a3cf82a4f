"""Value-segment housekeeping of the ``vlog`` layout: flush, prefetch, release, relocation.

- **Flush** (async mode): segments appended to are fdatasync'd every ``timer_flush_interval_ms``;
  the ``meta`` memtable is flushed per ``META_FLUSH_EVERY`` body bytes so it pins no WAL file.
- **Prefetch**: bodies due within ``vlog_prefetch_ms`` get a ``POSIX_FADV_WILLNEED`` hint, so a
  cold backlog is read by the kernel before the deliverer needs it (no memory held here).
- **Release**: a sealed segment with no live record is deleted after the RocksDB WAL is synced
  (its zero count is durable) and the row read back from RocksDB confirms it. It runs on a
  thread of its own and holds the store lock only to pick, detach and forget segments: the
  WAL sync and the file deletions (a few ms each) never stall a claim or a send.
- **Relocation** (once per body at most): a sealed *arrival* segment whose live fraction fell
  below θ (``vlog_reclaim_live_pct``) or that is older than A (``vlog_reclaim_age_sec``), and
  that would otherwise stay pinned for more than ``vlog_reclaim_min_pinned_sec`` *and* at least
  as long again as it has lived (its latest due time is that far ahead: a segment near the end
  of its life, or of short delays, empties by itself soon, so moving it only costs writes; with
  delay classes this is the usual case, and relocation is left for segments emptied early, by
  cancels) has its live records copied, in due order, into the *long* segment of their due day, fdatasync'd, and
  re-pointed in one WriteBatch per piece; the old segment is then empty and released. Long
  segments are never relocated: they die with their day.

A relocation runs on a background thread (``maintain``) or in the caller (``relocate``); it
holds the store lock only to read and to re-point, never while it copies bytes. A record that
changed meanwhile (cancelled, claimed, delivered, re-sent) is not re-pointed: its copy is dead.
"""
from __future__ import annotations

import logging
from itertools import groupby
from typing import TYPE_CHECKING, Any

from rocksdict import ReadOptions, WriteBatch

from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.maint import in_background, running
from rocks_timer.timer.rocksdb.opening import META_CF
from rocks_timer.timer.rocksdb.scan import check_iterator
from rocks_timer.timer.rocksdb.segments import iter_records
from rocks_timer.timer.rocksdb.liveness import ARRIVAL, Changes, Segment, day_of, durable_rows

if TYPE_CHECKING:
    from rocks_timer.timer.rocksdb.store import RocksTimerStore

log = logging.getLogger(__name__)
PREFETCH_BUDGET = 20_000  # index entries examined per maintain call
PIECE_BYTES = 4 << 20  # live bytes re-pointed per WriteBatch
# Every batch writes ``meta``, whose memtable grows slowly (counters, liveness rows): left
# alone it would keep every WAL file alive. Flushing it per this many body bytes lets the WAL
# go with the index memtable's own flushes, without flushing the index early (a WAL size cap did
# that, and the small index SSTs it made cost +0.04 payload of compaction at 2,000,000
# messages). 256 MiB of bodies is about 25 MB of WAL, less than the index memtable holds back
# anyway; every 32 MiB, meta's due counters made 69 small flushes and their compactions at
# 2,000,000 month messages (21 MB flushed + 22 MB compacted, against 18 MB and none).
META_FLUSH_EVERY = 256 << 20


def maintain_vlog(store: "RocksTimerStore", now_ms: int) -> None:
    vlog, config = store.vlog, store.config
    hints: list[I.Pointer] = []
    with store._lock:
        if store._closed:
            return
        sync = (vlog.dirty and not vlog.sync_writes
                and now_ms - store._last_sync_ms >= config.timer_flush_interval_ms)
        if sync:
            store._last_sync_ms = now_ms
            dirty = vlog.take_dirty()
        vlog.seal(now_ms)
        appended = vlog.counters[K.META_VLOG_COUNTERS[0]]
        flush_meta = appended - store._meta_flushed_at >= META_FLUSH_EVERY \
            and not running(store._meta_flusher)
        if flush_meta:
            store._meta_flushed_at = appended
        if config.vlog_prefetch_ms:
            hints = _due_soon(store, now_ms, now_ms + config.vlog_prefetch_ms)
        empty = vlog.releasable()
    if sync:  # on a thread of its own: deliveries never wait for the disk here (syncer.py)
        store._syncer.request(dirty)
    if hints:
        vlog.will_need(hints)
    if flush_meta:  # after the value bytes its liveness rows count (a background sync first)
        in_background(store, "_meta_flusher", "vlog-meta-flush", "flushing meta",
                      _flush_meta)
    if empty:
        _maybe_start_release(store)
    _maybe_start_relocation(store, now_ms)


def _flush_meta(store: "RocksTimerStore") -> None:
    store.flush_after_values((META_CF,), wait=False)


def _due_soon(store: "RocksTimerStore", now_ms: int, horizon_ms: int) -> list[I.Pointer]:
    """Pointers of index entries due after ``now_ms`` up to ``horizon_ms`` not hinted yet (call
    with the lock). Entries due already are not hinted: the claim reads them at once."""
    start = max(store._prefetched_to, store._claim_cursor, K.due_prefix(now_ms + 1))
    bound = K.due_prefix(horizon_ms + 1)
    if start >= bound:
        return []
    read_opts = ReadOptions()
    read_opts.set_iterate_upper_bound(bound)
    out: list[I.Pointer] = []
    last = None
    it = store._timer.iter(read_opts)
    try:
        it.seek(start)
        while it.valid() and len(out) < PREFETCH_BUDGET:
            last = it.key()
            pointer = I.pointer_or_none(it.value())
            if pointer is not None:
                out.append(pointer)
            it.next()
        full = it.valid()
        check_iterator(it, f"timer store {store.path} prefetch")
    finally:
        del it
    store._prefetched_to = K.key_successor(last) if full and last is not None else bound
    return out


def release_empty(store: "RocksTimerStore") -> int:
    """Delete sealed segments with no live record; returns the bytes freed.

    The store lock is held only to pick the segments (marked busy: no other release or
    relocation takes them), to detach them and to forget their rows; the WAL sync and the
    unlinks run without it. A crash after an unlink and before the row's delete leaves a row
    with no live record and no file, which the next release forgets (``ValueLog._open_file``)."""
    vlog = store.vlog
    with store._lock:
        store._check_open()
        segs = vlog.releasable()
        for seg in segs:
            seg.busy += 1
    if not segs:
        return 0
    rows = None
    try:
        # every batch that emptied them is durable before a file goes; values first, so the
        # WAL sync never makes an index entry durable ahead of the bytes it points at
        store.sync_values_then_wal()
        rows = durable_rows(store._meta, segs)
    finally:
        with store._lock:
            for seg in segs:
                seg.busy -= 1
            gone = vlog.detach(segs, rows) if rows is not None and not store._closed else []
    vlog.unlink(gone)  # and their names are gone for good before the rows are
    if not gone:
        return 0
    with store._lock:
        store._check_open()
        batch = WriteBatch(raw_mode=True)
        freed = vlog.forget(gone, batch)
        vlog.stage(Changes(), batch)  # the counters
        store._write(batch)
    return freed


def _maybe_start_release(store: "RocksTimerStore") -> None:
    if not running(store._releaser):
        in_background(store, "_releaser", "vlog-release", "releasing empty vlog segments",
                      release_empty)


def candidates(store: "RocksTimerStore", now_ms: int) -> list[Segment]:
    """Sealed arrival segments below θ or older than A (call with the lock)."""
    vlog, config = store.vlog, store.config
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


def _maybe_start_relocation(store: "RocksTimerStore", now_ms: int) -> None:
    if running(store._relocator):
        return
    with store._lock:
        if store._closed:
            return
        todo = candidates(store, now_ms)
        for seg in todo:
            seg.busy += 1
    if not todo:
        return
    in_background(store, "_relocator", "vlog-relocate", "vlog relocation", _relocate_all, todo,
                  now_ms)


def _relocate_all(store: "RocksTimerStore", segs: list[Segment], now_ms: int) -> None:
    try:
        for seg in segs:
            relocate_segment(store, seg, now_ms)
    finally:
        for seg in segs:
            seg.busy -= 1


def relocate(store: "RocksTimerStore", now_ms: int) -> dict[str, Any]:
    """Relocate every candidate segment now, in the caller (tests, ``rtimer compact``)."""
    with store._lock:
        store._check_open()
        todo = candidates(store, now_ms)
        for seg in todo:
            seg.busy += 1
    moved = 0
    try:
        for seg in todo:
            moved += relocate_segment(store, seg, now_ms)
    finally:
        for seg in todo:
            seg.busy -= 1
    freed = release_empty(store)
    return {"segments": len(todo), "relocated_records": moved, "released_bytes": freed}


def relocate_segment(store: "RocksTimerStore", seg: Segment, now_ms: int) -> int:
    """Move the live records of ``seg`` into long segments; returns how many moved."""
    damaged: list[tuple[int, str]] = []
    moved, piece, size = 0, [], 0
    for record in iter_records(seg.file, seg.end, damaged):
        piece.append(record)
        size += record[3]
        if size >= PIECE_BYTES:
            moved += _move_piece(store, seg, piece, now_ms)
            piece, size = [], 0
    if piece:
        moved += _move_piece(store, seg, piece, now_ms)
    for offset, reason in damaged:
        log.error("timer store %s: relocation of segment %d met a damaged record at %d: %s "
                  "(its index entry stays; it is set aside when due)", store.path, seg.id,
                  offset, reason)
    return moved


def _move_piece(store: "RocksTimerStore", seg: Segment, piece: list, now_ms: int) -> int:
    vlog = store.vlog
    with store._lock:
        store._check_open()
        current = store._timer.get([rec[1] for rec in piece])
        live = []
        for (offset, key, value, length), index_value in zip(piece, current):
            if index_value is None or key in store._in_flight:
                continue
            pointer = I.pointer_or_none(index_value)
            if pointer == (seg.id, offset, length):
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
            moved += _repoint(store, target, group, offsets)
        finally:
            target.busy -= 1
    return moved


def _repoint(store: "RocksTimerStore", target: Segment, group: list, offsets: list[int]) -> int:
    """Point the index at the copies in ``target``, for the records unchanged since read."""
    vlog, moved = store.vlog, 0
    with store._lock:
        store._check_open()
        now_values = store._timer.get([k for k, _, _ in group])
        batch = WriteBatch(raw_mode=True)
        changes = Changes()
        changes.add(target.id, 0, 0)
        for (key, _, seen), offset, now_value in zip(group, offsets, now_values):
            if now_value is None or bytes(now_value) != seen or key in store._in_flight:
                continue  # changed while we copied: the copy is dead
            new_value = I.repoint(seen, target.id, offset)
            batch.put(key, new_value, store._timer_h)
            changes.drop(seen)
            changes.keep(new_value)
            moved += 1
        new = vlog.stage(changes, batch)
        store._write(batch)
        vlog.commit(new)
    return moved
