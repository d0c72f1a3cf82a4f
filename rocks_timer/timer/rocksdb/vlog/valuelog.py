"""The value log of the ``vlog`` layout: segment files, their liveness table, appends, reads,
prefetch hints and release (ARCHITECTURE §8).

Liveness lives in ``meta`` under ``vlog.seg.<id>`` (``liveness.SEGMENT``) and changes only inside
the WriteBatch of the schedule, cancel, delivery, reconcile or relocation that changes it: the
store collects ``Changes`` while it builds a batch, ``stage`` puts the new rows into that batch,
and ``commit`` applies them in memory once the write succeeded. So the table is exact after a
``kill -9``: it is what the index says.

Segment kinds: *arrival* segments take new bodies in arrival order, one open segment per
**delay class** (the delay at send, in classes a factor of 1.5 wide: 1-1.5 s, 1.5-2.25 s, ...,
20-30 days, ...); *long* segments take bodies relocated by
:mod:`rocks_timer.timer.rocksdb.vlog.gc`, one open per due day. Because the bodies of one
arrival segment fall due within a factor of 1.5 of each other, a segment empties soon after its
oldest body would have: space stays near the live payload without rewriting anything. An
arrival segment is sealed when it is full, or once it has been open for a quarter of its
class's shortest delay (at least a second), so no segment stays open long enough to pin its
early bodies' space. A segment is sealed when it is not open; a sealed segment with no live
record is deleted (``release``) once its zero count is durable and re-read from RocksDB.

Crash order: record bytes appended (fdatasync'd first in sync mode) → index batch (with the
segment's new ``end``) → release; a removal (cancel, reschedule, reconcile, relocation; not a
delivery: ``vlog/cursor`` covers those) appends its removal record to the removed record's
segment before its index batch (segments.py). On
open, bytes past ``end`` were never indexed: they are kept, not cut (appends go on after them;
``rtimer repair`` reads them); a file shorter than ``end`` (power cut in async mode) is
reported, and the index entries pointing past it are set aside when they are claimed.
"""
from __future__ import annotations

import logging
import operator
import struct
import threading
from pathlib import Path
from typing import Any, Iterable

from rocks_timer.errors import CorruptRecordError
from rocks_timer.fileio import fsync_dir, mkdir_durably, replace_durably
from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb import index as I
from rocks_timer.timer.rocksdb.vlog.liveness import (ARRIVAL, LONG, SEGMENT, Changes, Segment,
                                                 day_of, delay_class, seal_age_ms)
from rocks_timer.timer.rocksdb.scan import check_iterator
from rocks_timer.timer.rocksdb.vlog import segments as S
from rocks_timer.timer.rocksdb.vlog.syncer import sync_segments

log = logging.getLogger(__name__)

SEG_PREFIX = K.META_VLOG_SEGMENT_PREFIX
META_NEXT_ID = K.META_VLOG_NEXT_ID
COUNTERS = K.META_VLOG_COUNTERS
APPENDED = COUNTERS[0]  # bytes appended to arrival segments (a send's one moving counter)
U64 = struct.Struct(">Q")
CURSOR_FILE = "cursor"  # the delivery cursor, for a rebuild (write_cursor)
COALESCE_GAP = 4096  # one prefetch hint for two records at most this many bytes apart
_SEGMENT_OFFSET = operator.itemgetter(0, 1)
frame_one = S.frame_many  # bound once: the single send frames one record


class ValueLog:
    """Owns ``timer-rocksdb/vlog/``: the segments, their liveness rows and the counters."""

    def __init__(self, directory: Path, config: Any, meta: Any, meta_h: Any) -> None:
        self.dir = directory
        self.segment_bytes = config.vlog_segment_bytes
        self.inline_max = config.vlog_inline_max_bytes
        self.sync_writes = config.rocksdb_sync or config.flush_disk_type == "sync"
        self._meta_h = meta_h
        self.segments: dict[int, Segment] = {}
        self.open_arrival: dict[int, Segment] = {}  # delay class -> open segment
        # the newest intact arrival segment of each class at open: a store reopened soon
        # (a CLI command, a restart) goes on appending there instead of starting a file
        self.reopenable: dict[int, Segment] = {}
        self.long_open: dict[int, Segment] = {}  # due day -> open segment
        self.counters: dict[bytes, int] = dict.fromkeys(COUNTERS, 0)
        self.next_id = 1
        self._stored: dict[bytes, int] = {}  # counter values known to be in ``meta``
        self._staged: dict[bytes, int] = {}  # put by the last ``stage``, not yet committed
        self.dirty: set[int] = set()  # appended since the last fdatasync (async mode)
        self.short_segments: list[int] = []
        # segment creation, sealing, choosing a relocation target and release: relocation works
        # off the store lock, so these meet here
        self._alloc_lock = threading.RLock()
        self.missing_segments: list[int] = []
        self.voided: list[int] = []  # segments whose never-indexed tail got a void record
        self._cursor_written: bytes | None = None
        self._cursor_lock = threading.Lock()
        self._load(meta)

    # -- open -------------------------------------------------------------------------------
    def _load(self, meta: Any) -> None:
        mkdir_durably(self.dir)
        raw = meta.get(META_NEXT_ID)
        self.next_id = U64.unpack(raw)[0] if raw is not None else 1
        if raw is not None:
            self._stored[META_NEXT_ID] = self.next_id
        for name, value in zip(COUNTERS, meta.get(list(COUNTERS))):
            self.counters[name] = U64.unpack(value)[0] if value is not None else 0
            if value is not None:
                self._stored[name] = self.counters[name]
        it = meta.iter()
        try:
            it.seek(SEG_PREFIX)
            while it.valid() and bytes(it.key()).startswith(SEG_PREFIX):
                key, value = bytes(it.key()), bytes(it.value())
                seg_id = K.segment_id_of(key)
                if seg_id is None or len(value) != SEGMENT.size:
                    raise CorruptRecordError(f"vlog liveness row {key!r} is malformed "
                                             f"({len(value)} bytes)", where=key, raw=value)
                self.segments[seg_id] = Segment(seg_id, *SEGMENT.unpack(value))
                it.next()
            check_iterator(it, f"vlog liveness rows of {self.dir}")
        finally:
            del it
        # never reuse the id of a segment whose row or file exists (a rolled-back next_id would
        # make a new segment truncate a live one)
        on_disk = [int(p.stem) for p in self.dir.glob("*.vlog") if p.stem.isdigit()]
        self.next_id = max([self.next_id, *(i + 1 for i in self.segments),
                            *(i + 1 for i in on_disk)])
        for seg in self.segments.values():
            self._open_file(seg)
            if seg.kind == ARRIVAL and seg.file is not None and seg.file.size == seg.end:
                newest = self.reopenable.get(seg.day)
                if newest is None or seg.id > newest.id:
                    self.reopenable[seg.day] = seg  # appended to again while young enough

    def _open_file(self, seg: Segment) -> None:
        path = self.dir / S.segment_name(seg.id)
        if not path.exists():
            if seg.live_count:
                self.missing_segments.append(seg.id)
                log.error("vlog segment %s is missing but %d live records point into it; they "
                          "will be set aside as corrupt when due", path, seg.live_count)
            return
        seg.file = S.SegmentFile(self.dir, seg.id)
        if seg.file.size > seg.end:
            # written before an index batch that never ran (a kill -9 in between): not
            # acknowledged (RocksDB replayed its whole WAL, so the index has every acknowledged
            # write). Kept, never cut (issue 30), and voided so a rebuild ignores it
            # (segments.py); the row's new end goes in with the store's first batch
            log.info("vlog segment %s: %d bytes past the index's end were never indexed "
                     "(a write cut short by a crash); kept and marked void", path,
                     seg.file.size - seg.end)
            seg.file.append(S.frame_void(seg.end, seg.file.size))
            if self.sync_writes:
                seg.file.sync()
            else:
                self.dirty.add(seg.id)
            self.voided.append(seg.id)
        elif seg.file.size < seg.end:
            self.short_segments.append(seg.id)
            log.error("vlog segment %s is %d bytes but the index covers %d (a power cut in async "
                      "mode?); records past the end will be set aside when due", path,
                      seg.file.size, seg.end)

    # -- appends ----------------------------------------------------------------------------
    def _new_segment(self, kind: int, day: int, now_ms: int) -> Segment:
        """A new empty segment; its id is persisted (``next_id``) by the next ``stage``, which
        comes before any index entry can point into it."""
        with self._alloc_lock:
            while self.next_id in self.segments or (
                    self.dir / S.segment_name(self.next_id)).exists():
                self.next_id += 1  # a file left by a crash is evidence: never truncated
            seg = Segment(self.next_id, kind, day, now_ms, 0, 0, 0, 0)
            seg.file = S.SegmentFile(self.dir, seg.id)
            self.next_id += 1
            self.segments[seg.id] = seg
        return seg

    def append(self, raw_keys: list[bytes], values: list[bytes], now_ms: int, batch: Any,
               changes: Changes, fields: list[tuple[int | None, int, str | None]],
               dues: list[int] | None = None, live: bool = False) -> list[bytes]:
        """Write the bodies of a schedule batch, each into the open segment of its delay class;
        returns the index value of each record (a pointer, or the value itself when it is small)
        and records the moved segment ends in ``changes``. ``fields`` holds each record's
        (queue id, body size, tags), which its pointer carries; ``dues`` each key's due time
        (read from the keys when None). The caller adds the live counts, or passes ``live``
        when every record written here stays in the index (distinct keys): then they are
        counted here, per segment, without reading each pointer back."""
        out: list[bytes] = list(values)
        groups: dict[int, list[int]] = {}
        inline_max = self.inline_max
        if dues is None:
            dues = [K.key_due_ms(key) for key in raw_keys]
        for i, value in enumerate(values):
            if len(value) > inline_max:
                groups.setdefault(delay_class(dues[i] - now_ms), []).append(i)
        for cls, members in groups.items():
            blob, lengths = S.frame_many([raw_keys[i] for i in members],
                                         [values[i] for i in members])
            size = len(blob)
            seg, pos = self.append_arrival(cls, blob, now_ms)
            encode = I.encode_pointer
            for i, length in zip(members, lengths):
                out[i] = encode(seg.id, pos, length, *fields[i])
                pos += length
            latest = max([dues[i] for i in members])
            if latest > seg.max_due_ms:
                seg.max_due_ms = latest
            # its end moves even if every record is overwritten
            changes.add(seg.id, len(members) if live else 0, size if live else 0)
        return out

    def append_one(self, raw: bytes, value: bytes, due_ms: int, now_ms: int,
                   fields: tuple[int | None, int, str | None], batch: Any
                   ) -> tuple[bytes, tuple]:
        """A single send's record into the open segment of its delay class, with what
        :meth:`stage` would put into ``batch`` for it: the segment's liveness row (one more
        live record) and the counters that moved (the appended bytes; the next segment id when
        the append opened a segment). The other counters move only in relocations and
        releases, whose own transactions stage them. Returns the pointer the index keeps and
        what :meth:`commit_one` takes once the batch is written (the single send,
        ``Writer.send_one``: a send's share of the generic staging was a loop over every
        counter)."""
        blob = frame_one([raw], [value])[0]
        size = len(blob)
        seg, pos = self.append_arrival(delay_class(due_ms - now_ms), blob, now_ms)
        if due_ms > seg.max_due_ms:
            seg.max_due_ms = due_ms
        count, nbytes, end = seg.live_count + 1, seg.live_bytes + size, seg.file.size
        meta_h = self._meta_h
        self._put_liveness(batch, seg, count, nbytes, end)
        appended = self.counters[APPENDED]
        batch.put(APPENDED, U64.pack(appended), meta_h)
        next_id = self.next_id
        if self._stored.get(META_NEXT_ID) != next_id:
            batch.put(META_NEXT_ID, U64.pack(next_id), meta_h)
        else:
            next_id = None
        return (I.encode_pointer(seg.id, pos, size, *fields),
                (seg, count, nbytes, end, appended, next_id))

    def commit_one(self, staged: tuple) -> None:
        """After the batch :meth:`append_one` filled is written."""
        seg, count, nbytes, end, appended, next_id = staged
        seg.live_count, seg.live_bytes, seg.end = count, nbytes, end
        stored = self._stored
        stored[APPENDED] = appended
        if next_id is not None:
            stored[META_NEXT_ID] = next_id

    def append_arrival(self, cls: int, blob: bytes, now_ms: int) -> tuple[Segment, int]:
        """Append framed records to the open arrival segment of delay class ``cls`` (a new one
        when there is none or it is full); returns the segment and where ``blob`` starts."""
        seg = self.open_arrival.get(cls) or self._reopen(cls, now_ms)
        if seg is None or (seg.file.size and seg.file.size + len(blob) > self.segment_bytes):
            seg = self.open_arrival[cls] = self._new_segment(ARRIVAL, cls, now_ms)
        pos = seg.file.append(blob)
        if self.sync_writes:
            seg.file.sync()
        else:
            self.dirty.add(seg.id)
        self.counters[APPENDED] += len(blob)
        return seg, pos

    def _reopen(self, cls: int, now_ms: int) -> Segment | None:
        """The class's segment left open by the previous process, if it is still young enough
        to be open, intact, and not being relocated or released."""
        seg = self.reopenable.pop(cls, None)
        with self._alloc_lock:
            if (seg is None or self.segments.get(seg.id) is not seg or seg.busy
                    or seg.file is None or seg.file.size != seg.end
                    or not 0 <= now_ms - seg.created_ms < seal_age_ms(cls)):
                return None
            self.open_arrival[cls] = seg
            return seg

    def append_long(self, day: int, records: list[tuple[bytes, bytes]], now_ms: int
                    ) -> tuple[Segment, list[int]]:
        """Relocation: append ``(key, value)`` records (in due order) to the open long segment
        of ``day``; fdatasync'd before the caller re-points the index. Returns the segment and
        each record's offset."""
        framed = [S.frame(k, v) for k, v in records]
        size = sum(map(len, framed))
        with self._alloc_lock:
            seg = self.long_open.get(day)
            if seg is None or (seg.file.size and seg.file.size + size > self.segment_bytes):
                seg = self.long_open[day] = self._new_segment(LONG, day, now_ms)
            seg.busy += 1  # the caller releases it once the index points into it (or not)
        base = seg.file.append(b"".join(framed))
        seg.file.sync()
        offsets, pos = [], base
        for record in framed:
            offsets.append(pos)
            pos += len(record)
        self.counters[COUNTERS[1]] += size
        self.counters[COUNTERS[2]] += len(records)
        return seg, offsets

    def mark_dead(self, dead: dict[int, list[int]]) -> None:
        """Append a removal record to each segment of ``dead`` (segment id -> offsets of its
        records leaving the index), before the index batch that removes them (segments.py):
        fdatasync'd in sync mode, else synced with the next flush, before the WAL."""
        for seg_id, offsets in dead.items():
            seg = self.segments.get(seg_id)
            if seg is None or seg.file is None or not offsets:
                continue  # released or missing: nothing of it can be rebuilt anyway
            blob = S.frame_removal(offsets)
            seg.file.append(blob)
            if self.sync_writes:
                seg.file.sync()
            else:
                self.dirty.add(seg_id)
            self.counters[COUNTERS[0]] += len(blob)

    def stage(self, changes: Changes, batch: Any) -> dict[int, tuple[int, int, int]]:
        """Put the changed liveness rows (and counters) into ``batch``; returns the new values
        for ``commit``. Live counts never go below zero (a bug, not a state): it raises. The
        removal records of the pointers ``changes`` dropped are appended first, so the rows'
        ends cover them."""
        dead = getattr(changes, "dead", None)
        if dead:
            self.mark_dead(dead)
        new: dict[int, tuple[int, int, int]] = {}
        for seg_id, (dcount, dbytes) in changes.items():
            seg = self.segments.get(seg_id)
            if seg is None:
                continue  # released already: a pointer to it was set aside as lost
            count, nbytes = seg.live_count + dcount, seg.live_bytes + dbytes
            if count < 0 or nbytes < 0:
                raise CorruptRecordError(f"vlog segment {seg_id}: live count would become "
                                         f"{count} records / {nbytes} bytes", where=seg_id)
            end = seg.file.size if seg.file is not None else seg.end
            new[seg_id] = (count, nbytes, end)
            self._put_liveness(batch, seg, count, nbytes, end)
        staged = {}  # counters go in only when they differ from what is stored
        for name, value in (*self.counters.items(), (META_NEXT_ID, self.next_id)):
            if self._stored.get(name) != value:
                batch.put(name, U64.pack(value), self._meta_h)
                staged[name] = value
        self._staged = staged
        return new

    def stage_removed_one(self, index_value: bytes, batch: Any
                          ) -> dict[int, tuple[int, int, int]] | None:
        """:meth:`stage` for one index value leaving the index (the single cancel,
        ``Writer.cancel_one``): the changes ``drop_pointers`` and ``Changes.removed`` collect
        for it, built directly. None (nothing staged, nothing to commit) for an inline value,
        as the batch path stages nothing then."""
        if len(index_value) < I.SIZE or index_value[0] != I.POINTER_VERSION:
            return None
        _, seg_id, offset, length = I.POINTER.unpack_from(index_value)[:4]
        changes = Changes()
        changes[seg_id] = [-1, -length]
        changes.removed([index_value])
        return self.stage(changes, batch)

    def _put_liveness(self, batch: Any, seg: Segment, count: int, nbytes: int,
                      end: int) -> None:
        """The segment's liveness row with these live figures and end (the one writer of
        the row's format for a batch: ``stage`` and the single send's ``append_one``)."""
        batch.put(K.segment_meta_key(seg.id), SEGMENT.pack(
            seg.kind, seg.day, seg.created_ms, count, nbytes, end, seg.max_due_ms), self._meta_h)

    def commit(self, new: dict[int, tuple[int, int, int]]) -> None:
        """After the batch ``stage`` filled is written."""
        self._stored.update(self._staged)
        self._staged = {}
        for seg_id, (count, nbytes, end) in new.items():
            seg = self.segments.get(seg_id)
            if seg is not None:
                seg.live_count, seg.live_bytes, seg.end = count, nbytes, end

    # -- reads ------------------------------------------------------------------------------
    def read(self, key: bytes, pointer: I.Pointer) -> bytes:
        """The value the pointer names; CorruptRecordError (naming segment and offset) when the
        segment is gone, the record is short, damaged, or holds another key."""
        seg = self.segments.get(pointer.segment)
        where = f"vlog segment {pointer.segment} offset {pointer.offset}"
        if seg is None or seg.file is None:
            raise CorruptRecordError(f"{where}: the segment is missing", where=where)
        data = seg.file.read(pointer.offset, pointer.length)
        if len(data) < pointer.length:
            raise CorruptRecordError(f"{where}: {len(data)} of {pointer.length} bytes on disk "
                                     f"(the segment ends early)", where=where, raw=data)
        stored_key, value, _ = S.parse(data, 0, where)
        if stored_key != key:
            raise CorruptRecordError(f"{where}: record holds key {stored_key.hex()}, the index "
                                     f"expected {bytes(key).hex()}", where=where, raw=data)
        return value

    def descriptors(self) -> dict[int, int]:
        """Segment id -> the open file descriptor of each segment with a file (the native
        claim reads bodies through them)."""
        return {sid: seg.file.fd for sid, seg in self.segments.items() if seg.file is not None}

    def will_need(self, pointers: Iterable[I.Pointer]) -> int:
        """Prefetch hints for records due soon; returns how many ranges were hinted."""
        n, current, start, end = 0, None, 0, 0
        for p in sorted(pointers, key=_SEGMENT_OFFSET):  # neighbours merged into one range
            if current is not None and p.segment == current.id and \
                    p.offset - end <= COALESCE_GAP:
                end = max(end, p.offset + p.length)
                continue
            if current is not None:
                current.will_need(start, end - start)
            seg = self.segments.get(p.segment)
            current = seg.file if seg is not None and seg.file is not None else None
            start, end = p.offset, p.offset + p.length
            n += current is not None
        if current is not None:
            current.will_need(start, end - start)
        return n

    # -- housekeeping -----------------------------------------------------------------------
    def write_cursor(self, cursor: bytes) -> bool:
        """Keep ``vlog/cursor`` (crash-safely replaced) at the store's delivery cursor: every key
        below it was delivered, its copy durable in the CommitLog first (the deliverer syncs it
        before ``complete``). A rebuild takes the larger of it and the cursor ``meta`` kept, so
        a delivery needs no removal record while its index survives or not. A stale file only
        makes a rebuild reconcile more from the CommitLog. Returns whether it wrote."""
        with self._cursor_lock:
            if cursor == self._cursor_written or not cursor:
                return False
            replace_durably(self.dir / CURSOR_FILE, cursor)
            self._cursor_written = cursor
            return True

    def take_dirty(self) -> list[Segment]:
        """The segments appended to since the last call (their fdatasync is the caller's)."""
        segs = [self.segments[i] for i in self.dirty if i in self.segments]
        self.dirty.clear()
        return segs

    def seal(self, now_ms: int) -> None:
        """Seal the long segments of past days and the arrival segments open long enough."""
        today = day_of(now_ms)
        with self._alloc_lock:
            for d in [d for d in self.long_open if d < today]:
                del self.long_open[d]
            for cls, seg in list(self.open_arrival.items()):
                if now_ms - seg.created_ms >= seal_age_ms(cls):
                    del self.open_arrival[cls]

    def is_sealed(self, seg: Segment) -> bool:
        opened = self.open_arrival if seg.kind == ARRIVAL else self.long_open
        return opened.get(seg.day) is not seg

    def releasable(self) -> list[Segment]:
        return [s for s in self.segments.values()
                if s.live_count == 0 and not s.busy and self.is_sealed(s)]

    def detach(self, segs: list[Segment], durable_rows: dict[int, bytes | None]) -> list[Segment]:
        """Take out of the store's view the segments of ``segs`` still empty, sealed and idle
        whose durable row (re-read from RocksDB after a WAL sync) confirms zero live records;
        their files are deleted next (``unlink``), their rows last (``forget``)."""
        gone = []
        with self._alloc_lock:
            for seg in segs:
                if seg.busy or seg.live_count or not self.is_sealed(seg):
                    continue  # picked up by a relocation since the list was made
                if self.segments.get(seg.id) is not seg:
                    continue  # released by another caller meanwhile
                row = durable_rows.get(seg.id)
                if row is not None and SEGMENT.unpack(row)[3] != 0:
                    log.error("vlog segment %d: memory says empty, RocksDB says %d live; kept",
                              seg.id, SEGMENT.unpack(row)[3])
                    continue
                del self.segments[seg.id]
                self.dirty.discard(seg.id)
                gone.append(seg)
        return gone

    def unlink(self, segs: list[Segment]) -> None:
        """Close and delete the files of detached segments; the directory is fsynced after, so
        an unlink a power cut would undo never outlives the row forgotten next (a file back
        without its row would hold records no index knows, ARCHITECTURE §9)."""
        for seg in segs:
            if seg.file is not None:
                seg.file.close()
                try:
                    seg.file.path.unlink()
                except FileNotFoundError:
                    pass
        if segs:
            fsync_dir(self.dir)

    def forget(self, segs: list[Segment], batch: Any) -> int:
        """The rows of detached, unlinked segments go into ``batch``; returns bytes freed."""
        freed = 0
        for seg in segs:
            freed += seg.end
            batch.delete(K.segment_meta_key(seg.id), self._meta_h)
            self.counters[COUNTERS[3]] += seg.end
            self.counters[COUNTERS[4]] += 1
        return freed

    def note_lost(self, n: int) -> None:
        self.counters[COUNTERS[5]] += n

    def close(self) -> None:
        self._meta_h = None  # a live column family handle would keep the RocksDB LOCK
        sync_segments(self.take_dirty())
        for seg in self.segments.values():
            if seg.file is not None:
                seg.file.close()

    def drop_caches(self) -> None:
        """Evict every segment from the page cache (the cold-backlog benchmark)."""
        for seg in self.segments.values():
            if seg.file is not None:
                seg.file.drop_cache()

    # -- figures ----------------------------------------------------------------------------
    def figures(self) -> dict[str, Any]:
        segs = list(self.segments.values())
        live = sum(s.live_bytes for s in segs)
        total = sum(s.end for s in segs)
        return {
            "vlog_segments": len(segs),
            "vlog_arrival_segments": sum(s.kind == ARRIVAL for s in segs),
            "vlog_long_segments": sum(s.kind == LONG for s in segs),
            "vlog_live_bytes": live,
            "vlog_segment_bytes": total,
            "vlog_live_fraction": round(live / total, 4) if total else 1.0,
            "vlog_appended_bytes": self.counters[COUNTERS[0]],
            "vlog_relocated_bytes": self.counters[COUNTERS[1]],
            "vlog_relocated_count": self.counters[COUNTERS[2]],
            "vlog_released_bytes": self.counters[COUNTERS[3]],
            "vlog_released_segments": self.counters[COUNTERS[4]],
            "vlog_lost": self.counters[COUNTERS[5]],
            "vlog_short_segments": list(self.short_segments),
            "vlog_missing_segments": list(self.missing_segments),
        }
