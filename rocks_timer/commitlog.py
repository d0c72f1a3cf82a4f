"""The CommitLog: segmented append-only files of message records (layout in ``record.py``).

Segments are named by the 20-digit CommitLog offset of their first byte and hold
``segment_size`` bytes at most; a record never spans two segments (the tail of a segment is
padded with a blank). On open the newest segment is walked record by record with CRC checks and
a torn or corrupt tail is truncated, keeping everything before it. Appends come from one writer
(``MessageStore``'s group-commit thread); reads may come from any thread.
"""
from __future__ import annotations

import bisect
import logging
import mmap
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from rocks_timer.errors import CorruptRecordError
from rocks_timer.private import FILE_MODE
from rocks_timer.fileio import pwrite_all
from rocks_timer.record import (BLANK_MAGIC, FIXED_SIZE, MESSAGE_MAGIC, MIN_BLANK_LEN, PREFIX,
                                decode_record, encode_blank)

log = logging.getLogger(__name__)
_STORE_MS = struct.Struct(">q")
_STORE_MS_AT = 56


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
class RawRecord:
    offset: int
    data: bytes


class CommitLog:
    """Segmented files under one directory; ``min_offset``/``max_offset`` bound the live bytes."""

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
        self.syncs = 0  # fdatasync rounds run by sync_to (async mode's flushes)
        directory.mkdir(parents=True, exist_ok=True)
        self._open_segments()
        self._synced = 0
        self.sync_to(self.max_offset)  # what recovery kept may still be in the page cache only

    # -- open and recovery ---------------------------------------------------------------
    def _open_segments(self) -> None:
        for path in sorted(p for p in self.directory.iterdir() if p.name.isdigit()):
            fd = os.open(path, os.O_RDWR)
            self._segments.append(Segment(int(path.name), path, fd, os.fstat(fd).st_size))
        self._starts = [s.start for s in self._segments]
        if self._segments:
            self._recover_tail(self._segments[-1])

    def _recover_tail(self, segment: Segment) -> None:
        valid = 0
        for offset, data in self._walk(segment, check=True):
            if data is None:  # blank: the segment was full
                valid = segment.written
                break
            valid = offset + len(data) - segment.start
            segment.last_store_ms = _STORE_MS.unpack_from(data, _STORE_MS_AT)[0]
        if valid < segment.written:
            self.truncated_bytes = segment.written - valid
            log.warning("commitlog %s: truncated a torn or corrupt tail of %d bytes at offset %d",
                        segment.path.name, self.truncated_bytes, segment.start + valid)
            os.ftruncate(segment.fd, valid)
            segment.written = valid

    def _walk(self, segment: Segment, check: bool, from_offset: int | None = None
              ) -> Iterator[tuple[int, bytes | None]]:
        """Records of one segment as (offset, bytes); a blank yields (offset, None) and ends it.
        Stops silently at the first record that fails its checks."""
        length = segment.written
        if length == 0:
            return
        with mmap.mmap(segment.fd, length, access=mmap.ACCESS_READ) as view:
            pos = 0 if from_offset is None else from_offset - segment.start
            while pos + MIN_BLANK_LEN <= length:
                size, magic = PREFIX.unpack_from(view, pos)
                if magic == BLANK_MAGIC and size >= MIN_BLANK_LEN and pos + size == length:
                    yield segment.start + pos, None
                    return
                if magic != MESSAGE_MAGIC or size < FIXED_SIZE or pos + size > length:
                    return
                data = view[pos:pos + size]
                if check:
                    try:
                        decode_record(data, segment.start + pos)
                    except CorruptRecordError:
                        return
                yield segment.start + pos, data
                pos += size

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
        if tail.written + size + MIN_BLANK_LEN > self.segment_size:
            blank = self.segment_size - tail.written
            os.pwrite(tail.fd, encode_blank(blank), tail.written)
            tail.written += blank
            self.bytes_written += blank
            if self.sync_flush:
                os.fdatasync(tail.fd)
                if self._synced == tail.end - blank:
                    self._synced = tail.end
            self._new_segment(tail.start + self.segment_size)
        return self._segments[-1].end

    def write(self, position: int, data: bytes, store_ms: int) -> None:
        """Write bytes at ``position`` (the tail of the newest segment, from ``position_for``)."""
        tail = self._segments[-1]
        if position != tail.end or tail.written + len(data) > self.segment_size:
            raise ValueError(f"commitlog write at {position} does not continue {tail.end}")
        try:
            pwrite_all(tail.fd, data, tail.written)
            if self.sync_flush:
                os.fdatasync(tail.fd)
        except OSError:
            os.ftruncate(tail.fd, tail.written)
            raise
        tail.written += len(data)
        tail.last_store_ms = store_ms
        self.bytes_written += len(data)
        if self.sync_flush and self._synced == position:
            self._synced = tail.end

    def _new_segment(self, start: int) -> None:
        path = self.directory / f"{start:020d}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        _fsync_dir(self.directory)  # the new name survives a power cut with its first fsync
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
        return removed

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


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
