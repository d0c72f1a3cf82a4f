"""``TimerLog``: the append-only, segmented log of 52-byte units behind the wheel's slots.

Segments are files named by their 20-digit start offset, each at most ``segment_size`` bytes.
An append that would leave less than a blank's 16 bytes closes the segment with a blank filler
and goes to the next segment's start. Each append is handed to the OS at once (a unit must be
readable before the wheel slot that points at it is written, even across ``kill -9``);
``flush`` fsyncs them.
"""
from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
from pathlib import Path
from typing import Iterator

from rocks_timer.errors import ConfigError, CorruptRecordError, StoreClosedError
from rocks_timer.fileio import create_durably, fsync_dir, mkdir_durably
from rocks_timer.private import FILE_MODE
from rocks_timer.timer.wheel.layouts import (BLANK, BLANK_MAGIC, MIN_BLANK_LEN, UNIT, UNIT_SIZE,
                                             Unit, is_magic_ok)

log = logging.getLogger(__name__)


def _next_valid(data: bytes, pos: int) -> int | None:
    """The first unit position at or after ``pos`` (units are 52-byte aligned from the segment
    start, so ``pos`` is too) holding a valid unit, or None."""
    while pos + UNIT_SIZE <= len(data):
        size, _prev, magic = struct.unpack_from(">iqi", data, pos)
        if size == UNIT_SIZE and is_magic_ok(magic):
            return pos
        pos += UNIT_SIZE
    return None


class _Segment:
    __slots__ = ("start", "path", "fd", "written")

    def __init__(self, start: int, path: Path, fd: int, written: int):
        self.start = start
        self.path = path
        self.fd = fd
        self.written = written


class TimerLog:
    """Owns the TimerLog directory: appends, positioned reads, recovery scans, truncation, cleanup."""

    def __init__(self, directory: Path, segment_size: int):
        if segment_size < UNIT_SIZE + MIN_BLANK_LEN:
            raise ConfigError(f"timerlog segment size {segment_size} is below "
                              f"{UNIT_SIZE + MIN_BLANK_LEN} bytes")
        self.directory = Path(directory)
        mkdir_durably(self.directory)
        self.segment_size = segment_size
        self._segments: list[_Segment] = []
        self._starts: list[int] = []
        self._lock = threading.RLock()
        self._buffer = bytearray()  # appended, not yet written to the current segment
        self._closed = False
        self.bytes_written = 0
        self.flushed_where = 0
        self.damage: dict[int, int] = {}  # offset -> bytes of corrupt units skipped by scans
        self.corrupt_units = 0
        for path in sorted(self.directory.iterdir()):
            if path.name.isdigit() and len(path.name) == 20:
                size = path.stat().st_size
                if size > segment_size:
                    raise ConfigError(f"timerlog segment {path} is {size} bytes, larger than the "
                                      f"configured segment size {segment_size}")
                self._add_segment(int(path.name), size)
        # a segment missing before the last one: its units (and the messages they index) are
        # gone from the wheel; recovery re-enqueues them from the timer topic
        self.missing_segments = [f"{start:020d}" for start in range(
            self._starts[0] if self._starts else 0, self._starts[-1] if self._starts else 0,
            segment_size) if start not in set(self._starts)]
        self.short_segments = [s.path.name for s in self._segments[:-1]
                               if s.written != segment_size]
        self.flushed_where = self.max_offset

    # -- bookkeeping --------------------------------------------------------------------------
    def _add_segment(self, start: int, written: int = 0) -> _Segment:
        path = self.directory / f"{start:020d}"
        # durable by name before a unit in it is fsynced (and the checkpoint points past it)
        fd = create_durably(path, os.O_RDWR, FILE_MODE)
        segment = _Segment(start, path, fd, written)
        self._segments.append(segment)
        self._starts.append(start)
        return segment

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"timerlog {self.directory} is closed")

    @property
    def min_offset(self) -> int:
        with self._lock:
            return self._segments[0].start if self._segments else 0

    @property
    def max_offset(self) -> int:
        """The offset the next append would take (before a possible roll to a new segment)."""
        with self._lock:
            if not self._segments:
                return 0
            last = self._segments[-1]
            return last.start + last.written + len(self._buffer)

    def segment_starts(self) -> list[int]:
        with self._lock:
            return list(self._starts)

    # -- appends ------------------------------------------------------------------------------
    def append(self, data: bytes) -> int:
        """Append ``data``; returns its absolute offset."""
        self._check_open()
        n = len(data)
        if n + MIN_BLANK_LEN > self.segment_size:
            raise ConfigError(f"timerlog append of {n} bytes does not fit a segment of "
                              f"{self.segment_size} bytes")
        with self._lock:
            if not self._segments:
                self._add_segment(0)
            last = self._segments[-1]
            used = last.written + len(self._buffer)
            remaining = self.segment_size - used
            if n + MIN_BLANK_LEN > remaining:
                if remaining >= MIN_BLANK_LEN:
                    self._buffer += BLANK.pack(remaining, 0, BLANK_MAGIC)
                self._write_out_locked()
                os.ftruncate(last.fd, self.segment_size)  # the filler's tail is a hole
                last.written = self.segment_size
                last = self._add_segment(last.start + self.segment_size)
                used = 0
            offset = last.start + used
            self._buffer += data
            # written at once: after kill -9 the wheel (a shared mapping) never points past it
            self._write_out_locked()
            return offset

    def write_out(self) -> None:
        """Hand the buffered appends to the OS (readable, not yet fsynced)."""
        with self._lock:
            self._write_out_locked()

    def _write_out_locked(self) -> None:
        if not self._buffer:
            return
        last = self._segments[-1]
        os.pwrite(last.fd, self._buffer, last.written)
        last.written += len(self._buffer)
        self.bytes_written += len(self._buffer)
        self._buffer = bytearray()

    def flush(self) -> int:
        """Write out and fsync; returns the new flushed position."""
        self._check_open()
        with self._lock:
            self._write_out_locked()
            for segment in self._segments[-2:]:
                os.fsync(segment.fd)
            self.flushed_where = self.max_offset
            return self.flushed_where

    # -- reads --------------------------------------------------------------------------------
    def read(self, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset``; KeyError if the offset is not in the log."""
        self._check_open()
        with self._lock:
            i = bisect.bisect_right(self._starts, offset) - 1
            if i < 0:
                raise KeyError(f"timerlog offset {offset} is below {self.min_offset}")
            segment = self._segments[i]
            inside = offset - segment.start
            if i == len(self._segments) - 1 and inside + size > segment.written:
                self._write_out_locked()
            if inside + size > segment.written:
                raise KeyError(f"timerlog offset {offset} is past the end of its segment")
            return os.pread(segment.fd, size, inside)

    def read_unit(self, offset: int) -> Unit:
        data = self.read(offset, UNIT_SIZE)
        unit = Unit.unpack(data)
        if not unit.is_valid():
            raise CorruptRecordError(f"timerlog unit at {offset} is invalid "
                                     f"(size {unit.size}, magic {unit.magic})",
                                     where=offset, raw=data)
        return unit

    def scan_units(self, from_offset: int) -> Iterator[tuple[int, Unit]]:
        """Valid units from the start of the segment holding ``from_offset`` on.

        A segment ends at a blank. A unit whose size is not 52 or whose magic is bad ends the
        scan only when no valid unit follows it (a torn tail); otherwise it is corruption: it
        is counted in ``corrupt_units``, remembered in ``damage`` and skipped, and the scan
        goes on. ``scan_end`` is set to the end of the valid data afterwards.
        """
        self._check_open()
        self.write_out()
        with self._lock:
            i = max(0, bisect.bisect_right(self._starts, from_offset) - 1)
            segments = list(self._segments[i:])
        self.scan_end = segments[0].start if segments else 0
        for n, segment in enumerate(segments):
            data = os.pread(segment.fd, segment.written, 0)
            pos = 0
            while True:
                if pos + MIN_BLANK_LEN <= len(data):
                    size, _zero, magic = BLANK.unpack_from(data, pos)
                    if magic == BLANK_MAGIC and size == self.segment_size - pos:
                        break  # the rest of this segment is the blank filler
                if pos + UNIT_SIZE <= len(data):
                    fields = UNIT.unpack_from(data, pos)
                    if fields[0] == UNIT_SIZE and is_magic_ok(fields[2]):
                        yield segment.start + pos, Unit(*fields)
                        pos += UNIT_SIZE
                        continue
                if pos == len(data) and n + 1 < len(segments):
                    break  # a short sealed segment: reported by short_segments, not damage
                nxt = _next_valid(data, pos + UNIT_SIZE)
                if nxt is None and not any(_next_valid(os.pread(s.fd, s.written, 0), 0)
                                           is not None for s in segments[n + 1:]):
                    self.scan_end = segment.start + pos
                    return  # a torn tail: nothing valid after it
                stop = nxt if nxt is not None else len(data)
                self._note_damage(segment.start + pos, stop - pos)
                if nxt is None:
                    break
                pos = nxt
            self.scan_end = segment.start + self.segment_size
        if segments:
            self.scan_end = segments[-1].start + segments[-1].written

    def _note_damage(self, offset: int, length: int) -> None:
        if offset not in self.damage:
            self.damage[offset] = length
            self.corrupt_units += max(1, length // UNIT_SIZE)
            log.error("timerlog %s: %d corrupt bytes at offset %d skipped (valid units follow)",
                      self.directory, length, offset)

    def units_between(self, start: int, end: int) -> list[tuple[int, Unit]]:
        """Valid units at positions in [start, end), skipping damage (a broken slot chain is
        recovered from these)."""
        found = []
        for pos, unit in self.scan_units(start):
            if pos >= end:
                break
            if pos >= start:
                found.append((pos, unit))
        return found

    # -- recovery and cleanup -------------------------------------------------------------------
    def truncate(self, offset: int) -> int:
        """Drop everything at or after ``offset``; returns the bytes removed."""
        self._check_open()
        removed = 0
        with self._lock:
            self._write_out_locked()
            while self._segments and self._segments[-1].start > offset:
                segment = self._segments.pop()
                self._starts.pop()
                removed += segment.written
                os.close(segment.fd)
                segment.path.unlink()
            if self._segments:
                last = self._segments[-1]
                keep = offset - last.start
                if keep < last.written:
                    removed += last.written - keep
                    os.ftruncate(last.fd, keep)
                    last.written = keep
            self.flushed_where = min(self.flushed_where, self.max_offset)
        if removed:  # cut for good: a power cut never brings a torn segment back
            fsync_dir(self.directory)
        return removed

    def last_unit_offset(self) -> int:
        """Where the last unit of a full segment starts (every unit leaves room for a blank)."""
        return self.segment_size - (self.segment_size - MIN_BLANK_LEN) % UNIT_SIZE \
            - MIN_BLANK_LEN - UNIT_SIZE

    def delete_expired(self, min_commitlog_offset: int) -> int:
        """Delete leading segments whose last unit points below the CommitLog's min offset."""
        self._check_open()
        removed = 0
        last_unit = self.last_unit_offset()
        with self._lock:
            while len(self._segments) > 1:
                head = self._segments[0]
                data = os.pread(head.fd, UNIT_SIZE, last_unit)
                if len(data) < UNIT_SIZE:
                    break
                unit = Unit.unpack(data)
                if not unit.is_valid() or unit.commitlog_offset >= min_commitlog_offset:
                    break
                os.close(head.fd)
                head.path.unlink()
                self._segments.pop(0)
                self._starts.pop(0)
                removed += 1
        if removed:
            fsync_dir(self.directory)
        return removed

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._write_out_locked()
            for segment in self._segments:
                os.fsync(segment.fd)
                os.close(segment.fd)
            self._segments.clear()
            self._starts.clear()
            self._closed = True
