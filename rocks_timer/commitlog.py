"""The CommitLog: segmented append-only files of message records (layout in ``record.py``).

Segments are named by the 20-digit CommitLog offset of their first byte and hold
``segment_size`` bytes at most; a record never spans two segments (the tail of a segment is
padded with a blank). On open the newest segment is walked record by record with CRC checks.
Only a torn tail is truncated: an incomplete last record, or bytes after the last valid record
with no valid record after them. A bad record followed by valid ones is corruption: it is
reported (``damage``, counted in ``stats``, logged) and skipped, and the records after it are
kept. Every walk skips a damaged region the same way, resuming at the next record that checks
out. Appends come from one writer (``MessageStore``'s group-commit thread); reads may come from
any thread.
"""
from __future__ import annotations

import bisect
import logging
import mmap
import os
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from rocks_timer.errors import ConfigError, CorruptRecordError
from rocks_timer.fileio import create_durably, fsync_dir, mkdir_durably, pwrite_all
from rocks_timer.private import FILE_MODE
from rocks_timer.record import (BLANK_MAGIC, FIXED_SIZE, MESSAGE_MAGIC, MIN_BLANK_LEN, PREFIX,
                                encode_blank)

log = logging.getLogger(__name__)
_STORE_MS = struct.Struct(">q")
_STORE_MS_AT = 56
_CRC = struct.Struct(">I")
_MAGIC_BYTES = struct.pack(">I", MESSAGE_MAGIC)
_CRC_FROM = 12


@dataclass
class Segment:
    start: int
    path: Path
    fd: int
    written: int = 0          # bytes used, blank included
    last_store_ms: int = -1   # store time of its newest record (drives retention); -1 unknown

    @property
    def end(self) -> int:
        return self.start + self.written


@dataclass(frozen=True, slots=True)
class Damage:
    """A region of a segment that holds no valid record but has valid data after it."""

    offset: int   # CommitLog offset of its first byte
    length: int   # bytes skipped
    segment: str  # the segment file's name

    def describe(self) -> str:
        return (f"commitlog segment {self.segment}: {self.length} corrupt bytes at offset "
                f"{self.offset} skipped (valid records follow)")


@dataclass(frozen=True, slots=True)
class LostRange:
    """CommitLog bytes that should be there and are not: a segment missing between others, or
    a sealed segment shorter than a segment (its end was cut). Records in it are gone; which
    messages they were is what the ConsumeQueues say (``commitlog_loss``)."""

    start: int    # CommitLog offset of the first missing byte
    end: int      # offset after the last
    segment: str  # the segment file's name
    why: str      # "missing", "shorter than a sealed segment", ...

    def describe(self) -> str:
        if self.segment == "-":
            return f"commitlog bytes {self.start}..{self.end} are lost: {self.why}"
        return (f"commitlog segment {self.segment} is {self.why}: bytes {self.start}.."
                f"{self.end} are lost")


@dataclass(frozen=True, slots=True)
class RawRecord:
    offset: int
    data: bytes


class CommitLog:
    """Segmented files under one directory; ``min_offset``/``max_offset`` bound the live bytes.

    Opening finds the newest segment's torn tail (``torn_tail``) but does not cut it: the
    ``MessageStore`` first asks its ConsumeQueues whether anything acknowledged pointed there
    (then it is loss, recorded before the cut), and then calls :meth:`cut_torn_tail`."""

    writable = True
    _OPEN_FLAGS = os.O_RDWR

    def __init__(self, directory: Path, segment_size: int, sync_flush: bool):
        self.directory = directory
        self.segment_size = segment_size
        self.sync_flush = sync_flush
        self._segments: list[Segment] = []
        self._starts: list[int] = []
        self._lock = threading.Lock()  # guards the segment list, not the bytes
        self._sync_lock = threading.Lock()  # one fdatasync round at a time
        self.bytes_written = 0
        self.truncated_bytes = 0
        self._damage: dict[int, Damage] = {}  # by offset: every walk reports the same region once
        self.short_segments: list[str] = []   # sealed segments shorter than segment_size
        self.missing_segments: list[str] = []  # gaps between the first and the last
        self.syncs = 0  # fdatasync rounds run by sync_to (async mode's flushes)
        self.lost_ranges: list[LostRange] = []  # missing segments and cut sealed ones
        self.torn_tail: tuple[int, int] | None = None  # (offset, bytes) past the last record
        self._synced = 0
        self._prepare_directory()
        self._open_segments()

    def _prepare_directory(self) -> None:
        mkdir_durably(self.directory)

    # -- open and recovery ---------------------------------------------------------------
    def _open_segments(self) -> None:
        paths = sorted(p for p in self.directory.iterdir() if p.name.isdigit()) \
            if self.directory.is_dir() else []
        for path in paths:
            size = path.stat().st_size
            start = int(path.name)
            if start % self.segment_size or size > self.segment_size:
                raise ConfigError(
                    f"commitlog segment {path} (start {start}, {size} bytes) does not fit "
                    f"commitlog_segment_size={self.segment_size}: the data dir was made with "
                    "another segment size, or the file is damaged")
        for path in paths:
            fd = os.open(path, self._OPEN_FLAGS)
            self._segments.append(Segment(int(path.name), path, fd, os.fstat(fd).st_size))
        self._starts = [s.start for s in self._segments]
        present = set(self._starts)
        self.missing_segments = [f"{start:020d}" for start in range(
            self._starts[0] if self._starts else 0, self._starts[-1] if self._starts else 0,
            self.segment_size) if start not in present]
        for name in self.missing_segments:
            log.error("commitlog segment %s is missing: the records it held are lost", name)
            self.lost_ranges.append(LostRange(int(name), int(name) + self.segment_size, name,
                                              "missing"))
        for segment in self._segments[:-1]:
            if segment.written != self.segment_size:
                self.short_segments.append(segment.path.name)
                log.error("commitlog segment %s is %d bytes, a sealed segment has %d: the "
                          "records past its end are lost", segment.path.name, segment.written,
                          self.segment_size)
                self.lost_ranges.append(LostRange(segment.end, segment.start + self.segment_size,
                                                  segment.path.name,
                                                  "shorter than a sealed segment"))
        self.lost_ranges.sort(key=lambda r: r.start)
        if self._segments:
            self._find_torn_tail(self._segments[-1])

    def _find_torn_tail(self, segment: Segment) -> None:
        """Find a torn tail of the newest segment (``torn_tail``; cut by ``cut_torn_tail``);
        report (and keep what follows) a bad record that valid records follow."""
        valid = 0
        for kind, offset, data in self._scan(segment, check=True):
            if kind is _BLANK:  # the segment was full
                valid = segment.written
                break
            if kind is _RECORD:
                valid = offset + len(data) - segment.start
                segment.last_store_ms = _STORE_MS.unpack_from(data, _STORE_MS_AT)[0]
            elif kind is _DAMAGE:
                valid = offset + data - segment.start
        if valid < segment.written:
            self.torn_tail = (segment.start + valid, segment.written - valid)
            # walks and reads stop at the last whole record from here on (the bytes stay on
            # disk until cut_torn_tail)
            segment.written = valid

    def cut_torn_tail(self) -> int:
        """Cut the torn tail found on open (bytes after the last whole record, which nothing
        acknowledged points into: the MessageStore has checked) and sync what is kept.
        Returns the bytes cut."""
        if self.torn_tail is not None:
            offset, length = self.torn_tail
            segment = self._segments[-1]
            log.warning("commitlog %s: truncated a torn tail of %d bytes at offset %d (no valid "
                        "record after it)", segment.path.name, length, offset)
            os.ftruncate(segment.fd, offset - segment.start)
            self.truncated_bytes = length
            self.torn_tail = None
        self.sync_to(self.max_offset)  # what recovery kept may still be in the page cache only
        return self.truncated_bytes

    def _walk(self, segment: Segment, check: bool, from_offset: int | None = None
              ) -> Iterator[tuple[int, bytes | None]]:
        """Records of one segment as (offset, bytes); a blank yields (offset, None) and ends it.
        Damaged regions are skipped (and reported); the walk ends at a torn tail."""
        for kind, offset, data in self._scan(segment, check, from_offset):
            if kind is _RECORD:
                yield offset, data
            elif kind is _BLANK:
                yield offset, None

    def _scan(self, segment: Segment, check: bool, from_offset: int | None = None
              ) -> Iterator[tuple[object, int, object]]:
        """(kind, offset, payload): _RECORD with the bytes, _BLANK, _DAMAGE with the length
        skipped. Header checks always; with ``check`` the CRC too (a resync candidate is always
        CRC-checked, so garbage never passes for a record)."""
        length = segment.written
        if length == 0:
            return
        with mmap.mmap(segment.fd, length, access=mmap.ACCESS_READ) as view:
            pos = 0 if from_offset is None else from_offset - segment.start
            while pos + MIN_BLANK_LEN <= length:
                size, magic = PREFIX.unpack_from(view, pos)
                if magic == BLANK_MAGIC and size >= MIN_BLANK_LEN and pos + size == length:
                    yield _BLANK, segment.start + pos, None
                    return
                ok = magic == MESSAGE_MAGIC and size >= FIXED_SIZE and pos + size <= length
                if ok and check:
                    ok = _crc_ok(view, pos, size)
                if ok:
                    yield _RECORD, segment.start + pos, view[pos:pos + size]
                    pos += size
                    continue
                nxt = _resync(view, pos + 1, length)
                if nxt is None:
                    return  # a torn tail: nothing valid after it
                yield _DAMAGE, segment.start + pos, nxt - pos
                self._note_damage(Damage(segment.start + pos, nxt - pos, segment.path.name))
                pos = nxt

    def _note_damage(self, damage: Damage) -> None:
        if damage.offset not in self._damage:
            self._damage[damage.offset] = damage
            log.error("%s", damage.describe())

    @property
    def damage(self) -> list[Damage]:
        """Corrupt regions found so far (on open: in the newest segment; any walk adds more)."""
        return sorted(self._damage.values(), key=lambda d: d.offset)

    # -- offsets -------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        with self._lock:
            return self._segments[0].start if self._segments else 0

    @property
    def max_offset(self) -> int:
        """The offset the next record would start at (ignoring segment rolls)."""
        with self._lock:
            return self._segments[-1].end if self._segments else 0

    def segments(self) -> list[Segment]:
        with self._lock:
            return list(self._segments)

    # -- appends (single writer) ---------------------------------------------------------
    def segment_limit(self) -> int:
        """The last offset a record may end at in the newest segment (room kept for a blank)."""
        return self._segments[-1].start + self.segment_size - MIN_BLANK_LEN

    def position_for(self, size: int) -> int:
        """Offset where a record of ``size`` bytes will go, padding to a new segment if needed."""
        if not self._segments:
            self._new_segment(0)
        tail = self._segments[-1]
        if tail.written == self.segment_size:  # sealed already (the newer segments are gone)
            self._new_segment(tail.start + self.segment_size)
        elif tail.written + size + MIN_BLANK_LEN > self.segment_size:
            blank = self.segment_size - tail.written
            if blank:  # else sealed already: a crash came before the next segment's name
                os.pwrite(tail.fd, encode_blank(blank), tail.written)
                tail.written += blank
                self.bytes_written += blank
            # sealed and synced before the next segment's name exists, in async mode too (once
            # per segment): after a power cut a short sealed segment is damage, never the
            # unflushed tail of a log that went on in a file whose name outlived it
            os.fdatasync(tail.fd)
            if self._synced >= tail.start:
                self._synced = tail.end
            self._new_segment(tail.start + self.segment_size)
        return self._segments[-1].end

    def write(self, position: int, data: bytes, store_ms: int) -> None:
        """Write bytes at ``position`` (the tail of the newest segment, from ``position_for``)."""
        tail, size = self._segments[-1], len(data)
        written = tail.written
        if position != tail.start + written or written + size > self.segment_size:
            raise ValueError(f"commitlog write at {position} does not continue {tail.end}")
        try:
            pwrite_all(tail.fd, data, written)
            if self.sync_flush:
                os.fdatasync(tail.fd)
        except OSError:
            os.ftruncate(tail.fd, written)
            raise
        tail.written = written + size
        tail.last_store_ms = store_ms
        self.bytes_written += size
        if self.sync_flush and self._synced == position:
            self._synced = tail.end

    def _new_segment(self, start: int) -> None:
        path = self.directory / f"{start:020d}"
        fd = create_durably(path, os.O_RDWR, FILE_MODE)  # the name survives with its first fsync
        with self._lock:
            self._segments.append(Segment(start, path, fd))
            self._starts.append(start)

    # -- reads ---------------------------------------------------------------------------
    def read(self, offset: int, size: int | None = None) -> bytes:
        """Bytes of the record at ``offset``. KeyError if the offset is not in the log."""
        with self._lock:
            i = bisect.bisect_right(self._starts, offset) - 1
            if i < 0 or offset >= self._segments[i].end:
                raise KeyError(f"commitlog offset {offset} is outside [{self._min()}, "
                               f"{self._max()})")
            segment = self._segments[i]
        inside = offset - segment.start
        if size is None:
            head = os.pread(segment.fd, PREFIX.size, inside)
            if len(head) < PREFIX.size:
                raise CorruptRecordError(f"commitlog offset {offset}: truncated header",
                                         where=offset, raw=head)
            size = PREFIX.unpack(head)[0]
        if size < FIXED_SIZE or inside + size > segment.written:
            raise CorruptRecordError(f"commitlog offset {offset}: bad record size {size}",
                                     where=offset)
        return os.pread(segment.fd, size, inside)

    def _min(self) -> int:
        return self._segments[0].start if self._segments else 0

    def _max(self) -> int:
        return self._segments[-1].end if self._segments else 0

    def iter_raw(self, from_offset: int = 0) -> Iterator[RawRecord]:
        """Every record from ``from_offset`` on (clamped to the live range), in log order."""
        for segment in self.segments():
            if segment.end <= from_offset:
                continue
            start = from_offset if segment.start <= from_offset < segment.end else None
            if start is not None and start != segment.start:
                start = self._align(segment, start)
                if start is None:
                    continue
            for offset, data in self._walk(segment, check=False, from_offset=start):
                if data is not None:
                    yield RawRecord(offset, bytes(data))

    def _align(self, segment: Segment, offset: int) -> int | None:
        """The first record boundary at or after ``offset`` inside ``segment``."""
        for record_offset, data in self._walk(segment, check=False):
            if record_offset >= offset:
                return record_offset if data is not None else None
        return None

    # -- maintenance ---------------------------------------------------------------------
    def delete_expired(self, now_ms: int, reserved_ms: int) -> int:
        """Delete segments (never the newest) whose newest record is older than reserved_ms."""
        removed = 0
        with self._lock:
            while len(self._segments) > 1:
                head = self._segments[0]
                if head.last_store_ms < 0 or now_ms - head.last_store_ms <= reserved_ms:
                    break
                os.close(head.fd)
                head.path.unlink()
                self._segments.pop(0)
                self._starts.pop(0)
                removed += 1
        if removed:  # deleted for good: a power cut never brings an expired segment back
            fsync_dir(self.directory)
        return removed

    def iter_verified(self, until: int) -> Iterator[RawRecord]:
        """Every record below ``until`` whose CRC checks out, in log order (read-only; damaged
        regions are added to ``damage``). ``Broker.check`` walks this."""
        for segment in self.segments():
            if segment.start >= until:
                break
            for kind, offset, data in self._scan(segment, check=True):
                if offset >= until:
                    break
                if kind is _RECORD:
                    yield RawRecord(offset, bytes(data))

    @property
    def synced_offset(self) -> int:
        """Every byte before this offset has been fdatasync'd."""
        return self._synced

    def sync_to(self, offset: int) -> bool:
        """fdatasync the log up to at least ``offset`` (up to its current end); False when that
        was on disk already. Called by the deliverer before a timer store forgets what it
        delivered (async mode) and by the broker's periodic flush."""
        if offset <= self._synced:
            return False
        with self._sync_lock:
            if offset <= self._synced:
                return False
            with self._lock:
                end = self._max()
                todo = [s for s in self._segments if s.end > self._synced]
            for segment in todo:
                try:
                    os.fdatasync(segment.fd)
                except OSError:
                    if segment in self.segments():
                        raise
                    # deleted by retention meanwhile: nothing left to keep
            self._synced = max(self._synced, end)
            self.syncs += 1
            return True

    def flush(self) -> None:
        self.sync_to(self.max_offset)

    def close(self) -> None:
        with self._lock:
            for segment in self._segments:
                os.close(segment.fd)
            self._segments.clear()
            self._starts.clear()


class ReadOnlyCommitLog(CommitLog):
    """A CommitLog opened for reading only (``rtimer check``, ``ReadOnlyView``): files are
    opened ``O_RDONLY``, nothing is created, cut or synced; a torn tail is only reported
    (``torn_tail``) and the walks stop before it, as they would after the cut."""

    writable = False
    _OPEN_FLAGS = os.O_RDONLY

    def _prepare_directory(self) -> None:
        pass  # a missing directory reads as an empty log

    def cut_torn_tail(self) -> int:
        raise PermissionError("a read-only CommitLog cuts nothing")

    def position_for(self, size: int) -> int:
        raise PermissionError("a read-only CommitLog takes no writes")

    def write(self, position: int, data: bytes, store_ms: int) -> None:
        raise PermissionError("a read-only CommitLog takes no writes")

    def delete_expired(self, now_ms: int, reserved_ms: int) -> int:
        return 0

    def sync_to(self, offset: int) -> bool:
        return False


_RECORD, _BLANK, _DAMAGE = object(), object(), object()


def _crc_ok(view, pos: int, size: int) -> bool:
    return zlib.crc32(view[pos + _CRC_FROM:pos + size]) == _CRC.unpack_from(view, pos + 8)[0]


def _resync(view, start: int, length: int) -> int | None:
    """The first position at or after ``start`` where a whole record (CRC-checked) or the
    segment's closing blank begins; None if there is none (the rest is a torn tail)."""
    at = view.find(_MAGIC_BYTES, start + 4)
    while at >= 0:
        candidate = at - 4
        size = PREFIX.unpack_from(view, candidate)[0]
        if FIXED_SIZE <= size and candidate + size <= length and _crc_ok(view, candidate, size):
            return candidate
        at = view.find(_MAGIC_BYTES, at + 1)
    blank = struct.pack(">I", BLANK_MAGIC)
    at = view.find(blank, start + 4)
    while at >= 0:
        candidate = at - 4
        size = PREFIX.unpack_from(view, candidate)[0]
        if size >= MIN_BLANK_LEN and candidate + size == length:
            return candidate
        at = view.find(blank, at + 1)
    return None
