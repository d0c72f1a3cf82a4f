"""``TimerWheel``: the ``timerwheel`` file, 2 x slots_total slots of 32 bytes, memory-mapped.

The file is sparse: at p = 100 it is ~387 MB of which only touched pages take space. Writes go
through the mapping and only the dirty pages are flushed, so the whole image is never rewritten.
"""
from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path

import numpy as np

from rocks_timer.errors import ConfigError, StoreClosedError
from rocks_timer.fileio import create_durably, mkdir_durably
from rocks_timer.private import FILE_MODE
from rocks_timer.timer.wheel.layouts import BLANK_SLOT, LONG_MAX, SLOT, SLOT_SIZE, Slot

IGNORE = -2
PAGE_SIZE = mmap.PAGESIZE
_SLOT_DTYPE = np.dtype([("time", ">i8"), ("first", ">i8"), ("last", ">i8"), ("num", ">i4"),
                        ("magic", ">i4")])
_SEARCH_CHUNK = 1 << 20  # slots compared per numpy step when looking for the next busy slot


class TimerWheel:
    """Owns the wheel file: slot reads and writes, dirty-page flushing, slot searches."""

    def __init__(self, path: Path, slots_total: int, precision_ms: int):
        self.path = Path(path)
        self.slots_total = slots_total
        self.precision_ms = precision_ms
        self.wheel_slots = 2 * slots_total
        self.file_size = self.wheel_slots * SLOT_SIZE
        mkdir_durably(self.path.parent)
        exists = self.path.exists() and self.path.stat().st_size > 0
        self.created = not exists  # recovery: a wheel lost under a TimerLog re-enqueues
        if exists and self.path.stat().st_size != self.file_size:
            raise ConfigError(
                f"timer wheel {self.path} is {self.path.stat().st_size} bytes; this configuration "
                f"(precision {precision_ms} ms, {slots_total} slots) needs {self.file_size} bytes"
            )
        self._fd = create_durably(self.path, os.O_RDWR, FILE_MODE)
        if not exists:
            os.ftruncate(self._fd, self.file_size)  # sparse: holes read as zero
        self._mm = mmap.mmap(self._fd, self.file_size, access=mmap.ACCESS_WRITE)
        # No readahead: the dequeue walks slots in time order, so the kernel would read ahead
        # into large page-cache folios, and a 32-byte slot update would then dirty (and write
        # back) the whole folio, several times a page per update on this kernel (measured:
        # docs/BENCHMARKS.md, "Figures the code's comments rest on").
        self._mm.madvise(mmap.MADV_RANDOM)
        self._dirty: set[int] = set()
        self.bytes_flushed = 0
        self.slot_bytes_written = 0

    # -- addressing ---------------------------------------------------------------------------
    def slot_index(self, t_ms: int) -> int:
        return (t_ms // self.precision_ms) % self.wheel_slots

    def _floor(self, t_ms: int) -> int:
        return t_ms - t_ms % self.precision_ms

    def _check_open(self) -> None:
        if self._mm is None:
            raise StoreClosedError(f"timer wheel {self.path} is closed")

    # -- slot operations (RocketMQ's getSlot / putSlot / reviseSlot) ---------------------------
    def get_raw_slot(self, t_ms: int) -> Slot:
        self._check_open()
        stored, first, last, num, magic = SLOT.unpack_from(self._mm,
                                                           self.slot_index(t_ms) * SLOT_SIZE)
        return Slot(stored * self.precision_ms, first, last, num, magic)

    def get_slot(self, t_ms: int) -> Slot:
        """The slot for t, or the blank slot if empty or left from another round."""
        raw = self.get_raw_slot(t_ms)
        if raw.time_ms != self._floor(t_ms):
            return BLANK_SLOT
        return raw

    def put_slot(self, t_ms: int, first_pos: int, last_pos: int, num: int | None = None,
                 magic: int | None = None) -> None:
        """Write slot t; without ``num``/``magic`` those stay as stored."""
        self._check_open()
        at = self.slot_index(t_ms) * SLOT_SIZE
        if num is None or magic is None:
            _, _, _, old_num, old_magic = SLOT.unpack_from(self._mm, at)
            num = old_num if num is None else num
            magic = old_magic if magic is None else magic
        SLOT.pack_into(self._mm, at, t_ms // self.precision_ms, first_pos, last_pos, num, magic)
        self._dirty.add(at // PAGE_SIZE)
        self.slot_bytes_written += SLOT_SIZE

    def revise_slot(self, t_ms: int, first_pos: int, last_pos: int, force: bool) -> None:
        """Overwrite first/last (unless IGNORE) if the slot holds t; else only with ``force``."""
        raw = self.get_raw_slot(t_ms)
        if raw.time_ms == self._floor(t_ms):
            self.put_slot(t_ms, raw.first_pos if first_pos == IGNORE else first_pos,
                          raw.last_pos if last_pos == IGNORE else last_pos)
        elif force:
            self.put_slot(t_ms, last_pos if first_pos == IGNORE else first_pos, last_pos)

    def clear_slot(self, t_ms: int) -> None:
        """Zero the slot for t (it reads back blank)."""
        self._check_open()
        at = self.slot_index(t_ms) * SLOT_SIZE
        SLOT.pack_into(self._mm, at, 0, 0, 0, 0, 0)
        self._dirty.add(at // PAGE_SIZE)
        self.slot_bytes_written += SLOT_SIZE

    def get_num(self, t_ms: int) -> int:
        return self.get_slot(t_ms).num

    # -- vectorised scans over the wheel ----------------------------------------------------------
    def valid_runs(self, t0_ms: int, count: int):
        """Yield (first time, numpy view, valid mask) over ``count`` slots from t0, in chunks.

        Only the parts of the file that hold data are read: a hole reads as zero slots, whose
        time 0 never matches a slot time here, and touching it through the shared mapping would
        allocate a zeroed page-cache page for each of its pages (at p = 100 the whole 387 MB on
        every full scan, as recovery does at each open).
        """
        p = self.precision_ms
        t = self._floor(t0_ms)
        left = count
        while left > 0:
            index = self.slot_index(t)
            n = min(left, self.wheel_slots - index, _SEARCH_CHUNK)
            for lo, hi in self._data_ranges(index, index + n):
                view = np.frombuffer(self._mm, dtype=_SLOT_DTYPE, count=hi - lo,
                                     offset=lo * SLOT_SIZE)
                first = t // p + (lo - index)
                expected = np.arange(first, first + (hi - lo), dtype=np.int64)
                yield first * p, view, view["time"] == expected
                del view
            t += n * p
            left -= n

    def _data_ranges(self, lo: int, hi: int):
        """Slot ranges within [lo, hi) that may hold data, in order: the file's holes skipped.

        Pages written through the mapping count as data before they are written back (ext4 and
        xfs report delayed allocations as data, tmpfs its cached pages); a file system that
        cannot tell reports the whole file as data, so nothing written is ever skipped.
        """
        pos, end = lo * SLOT_SIZE, hi * SLOT_SIZE
        while pos < end:
            try:
                data = os.lseek(self._fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data at or after pos
                    return
                yield pos // SLOT_SIZE, hi  # this file system cannot say: read it all
                return
            if data >= end:
                return
            hole = min(os.lseek(self._fd, data, os.SEEK_HOLE), end)
            # holes are whole file-system blocks; rounded outwards to slots all the same
            yield data // SLOT_SIZE, -(-hole // SLOT_SIZE)
            pos = -(-hole // SLOT_SIZE) * SLOT_SIZE

    def next_busy_slot(self, from_ms: int, to_ms: int) -> int | None:
        """The first t in [from, to) whose slot holds t, or None."""
        self._check_open()
        p = self.precision_ms
        start = self._floor(from_ms)
        count = max(0, -(-(to_ms - start) // p))
        for t, _view, valid in self.valid_runs(start, count):
            hits = np.flatnonzero(valid)
            if hits.size:
                return t + int(hits[0]) * p
        return None

    def get_all_num(self, t0_ms: int) -> int:
        """Sum of num over the 2S slots from t0 whose stored time matches."""
        self._check_open()
        total = 0
        for _t, view, valid in self.valid_runs(t0_ms, self.wheel_slots):
            total += int(view["num"][valid].astype(np.int64).sum())
        return total

    def check_phy_pos(self, t0_ms: int, max_offset: int) -> int:
        """Smallest first_pos among valid slots (2S from t0) whose last_pos > max_offset."""
        self._check_open()
        best = LONG_MAX
        for _t, view, valid in self.valid_runs(t0_ms, self.wheel_slots):
            mask = valid & (view["last"] > max_offset)
            if mask.any():
                best = min(best, int(view["first"][mask].min()))
        return best

    def slots_pointing_past(self, t0_ms: int, end_pos: int) -> list[Slot]:
        """Valid slots (2S from t0) whose last_pos is at or past ``end_pos``."""
        self._check_open()
        found = []
        p = self.precision_ms
        for t, view, valid in self.valid_runs(t0_ms, self.wheel_slots):
            for i in np.flatnonzero(valid & (view["last"] >= end_pos)):
                row = view[int(i)]
                found.append(Slot(t + int(i) * p, int(row["first"]), int(row["last"]),
                                  int(row["num"]), int(row["magic"])))
        return found

    # -- durability ---------------------------------------------------------------------------------
    def flush(self) -> int:
        """Flush the dirty pages only; returns the bytes flushed (pages x page size)."""
        self._check_open()
        pages = sorted(self._dirty)
        self._dirty.clear()
        flushed = 0
        i = 0
        while i < len(pages):
            j = i
            while j + 1 < len(pages) and pages[j + 1] == pages[j] + 1:
                j += 1
            start = pages[i] * PAGE_SIZE
            length = min((pages[j] + 1) * PAGE_SIZE, self.file_size) - start
            self._mm.flush(start, length)
            flushed += length
            i = j + 1
        self.bytes_flushed += flushed
        return flushed

    @property
    def dirty_pages(self) -> int:
        return len(self._dirty)

    def close(self) -> None:
        if self._mm is None:
            return
        self.flush()
        self._mm.close()
        self._mm = None
        os.close(self._fd)
