"""Value segments of the ``vlog`` layout: append-only files of framed records (ARCHITECTURE §8).

A segment is ``timer-rocksdb/vlog/<id as 10 digits>.vlog``; its id, kind and counters live in
``meta`` (:mod:`rocks_timer.timer.rocksdb.vlog`). One record per stored message::

    offset size        field
    +----+-----------+-----------+--------------------------------------------------------+
    |  0 | 1         | magic     | 0xA7                                                   |
    |  1 | 2         | key_len   | bytes of the timer key                                 |
    |  3 | 4         | value_len | bytes of the value (the inline value codec's bytes)    |
    |  7 | 4         | crc32     | CRC32 of bytes 0..6, then the key, then the value      |
    +----+-----------+-----------+--------------------------------------------------------+
    | 11 | key_len B key | value_len B value                                              |
    +-------------------------------------------------------------------------------------+

The record carries its key so that a read can prove it is the record the index meant (a stale
pointer after a power cut reads another key and is refused), so relocation can ask the index
whether a record is still live without any other bookkeeping, and so the index can be rebuilt
from the segments (``rtimer repair``, :mod:`rocks_timer.timer.rocksdb.recovery`).

Two record kinds have an empty key (a timer key is never empty)::

    removal record (12 + 4 x n bytes)         void record (28 bytes)
    +----+-----+------------------------+     +----+-----+-------------------------------+
    |  0 | 11  | header, key_len = 0    |     |  0 | 11  | header, key_len = 0           |
    | 11 |  1  | REMOVAL_TAG (0xDE)     |     | 11 |  1  | VOID_TAG (0xDF)               |
    | 12 | 4 n | offsets (u32 BE) of    |     | 12 |  8  | start (u64 BE)                |
    |    |     | this segment's records |     | 20 |  8  | stop (u64 BE), exclusive      |
    +----+-----+------------------------+     +----+-----+-------------------------------+

A **removal record** names the offsets of records *of the same segment* that left the index
(delivered, cancelled, rescheduled, reconciled, relocated, or overwritten by a retry of their
key). It is appended to the segment holding those records
before the index batch that removes them, so it lives exactly as long as they do: a rebuild
never resurrects a removed message, and a segment released with its last live record takes
its removal records with it.

A **void record** says that the bytes of its segment in [start, stop) were never indexed: written before an index batch that never ran
(a ``kill -9`` or power cut in between). An open appends one for such a tail instead of cutting
it, so the bytes stay (evidence) but a rebuild counts neither the records nor the removal
records in it: an interrupted reschedule or cancel never comes back half done.
"""
from __future__ import annotations

import os
import struct
import threading
import zlib
from pathlib import Path

from rocks_timer.errors import CorruptRecordError
from rocks_timer.fileio import create_durably, pwrite_all

try:
    from rocks_timer._native import codec as native
except ImportError:  # pragma: no cover - no C compiler at install time
    native = None

HEAD = struct.Struct(">BHI")  # magic, key_len, value_len (the CRC follows)
HEADER = struct.Struct(">BHII")
SIZE = HEADER.size  # 11
MAGIC = 0xA7
MAX_KEY = (1 << 16) - 1
_CRC = struct.Struct(">I")
FILE_MODE = 0o600
_crc32 = zlib.crc32


def segment_name(segment_id: int) -> str:
    return f"{segment_id:010d}.vlog"


def frame(key: bytes, value: bytes) -> bytes:
    """The record bytes of ``key`` → ``value``."""
    head = HEAD.pack(MAGIC, len(key), len(value))
    tail = key + value
    return head + _CRC.pack(_crc32(tail, _crc32(head))) + tail


REMOVAL_TAG = 0xDE
_OFFSET = struct.Struct(">I")
REMOVAL_SIZE = SIZE + 1  # + 4 bytes per offset named


def frame_removal(offsets: list[int]) -> bytes:
    """The removal record naming ``offsets`` (records of the segment it is appended to)."""
    return frame(b"", bytes((REMOVAL_TAG,)) + b"".join(map(_OFFSET.pack, offsets)))


VOID_TAG = 0xDF
_RANGE = struct.Struct(">QQ")
VOID_SIZE = SIZE + 1 + _RANGE.size  # 28


def frame_void(start: int, stop: int) -> bytes:
    """The void record for the never-indexed bytes [start, stop) of its segment."""
    return frame(b"", bytes((VOID_TAG,)) + _RANGE.pack(start, stop))


def void_range(key: bytes, value: bytes) -> tuple[int, int] | None:
    if key or len(value) != 1 + _RANGE.size or value[0] != VOID_TAG:
        return None
    return _RANGE.unpack_from(value, 1)


def removal_offsets(key: bytes, value: bytes) -> list[int] | None:
    """The offsets a removal record names; None for a message record (or a malformed one)."""
    if key or not value or value[0] != REMOVAL_TAG or (len(value) - 1) % _OFFSET.size:
        return None
    return [o for (o,) in _OFFSET.iter_unpack(value[1:])]


def parse(buf: bytes | memoryview, pos: int, where: str) -> tuple[bytes, bytes, int]:
    """The record at ``pos`` of ``buf``: (key, value, end offset). CorruptRecordError when the
    magic, the lengths or the CRC do not hold, or the record runs past the buffer."""
    if len(buf) - pos < SIZE:
        raise CorruptRecordError(f"{where}: {len(buf) - pos} bytes left at offset {pos}, "
                                 f"shorter than a {SIZE}-byte record header", where=where)
    magic, key_len, value_len, crc = HEADER.unpack_from(buf, pos)
    if magic != MAGIC:
        raise CorruptRecordError(f"{where}: bad magic 0x{magic:02x} at offset {pos}", where=where)
    end = pos + SIZE + key_len + value_len
    if end > len(buf):
        raise CorruptRecordError(f"{where}: record at offset {pos} claims {end - pos} bytes, "
                                 f"only {len(buf) - pos} there", where=where)
    if _crc32(buf[pos + SIZE:end], _crc32(buf[pos:pos + 7])) != crc:
        raise CorruptRecordError(f"{where}: CRC mismatch in the record at offset {pos}",
                                 where=where, raw=bytes(buf[pos:end]))
    start = pos + SIZE
    return bytes(buf[start:start + key_len]), bytes(buf[start + key_len:end]), end


def parse_run_py(data: bytes, items: list[tuple[int, int, bytes]]) -> list[bytes | str]:
    """Check and split records read in one buffer: for each (at, length, key), the record's
    value, or a code saying why it is refused (``past-end``, ``bad-magic``, ``bad-length``,
    ``bad-crc``, ``other-key``). The reference of the native ``vlog_parse``."""
    out: list[bytes | str] = []
    size = len(data)
    for at, length, key in items:
        if at < 0 or length < SIZE or at > size or length > size - at:
            out.append("past-end")
            continue
        magic, key_len, value_len, crc = HEADER.unpack_from(data, at)
        if magic != MAGIC:
            out.append("bad-magic")
        elif SIZE + key_len + value_len != length:
            out.append("bad-length")
        elif _crc32(data[at + SIZE:at + length], _crc32(data[at:at + 7])) != crc:
            out.append("bad-crc")
        elif data[at + SIZE:at + SIZE + key_len] != key:
            out.append("other-key")
        else:
            out.append(data[at + SIZE + key_len:at + length])
    return out


def frame_many_py(keys: list[bytes], values: list[bytes]) -> tuple[bytes, list[int]]:
    """The records of consecutive (key, value) pairs back to back, and each record's length.
    The reference of the native ``vlog_frame``."""
    records = [frame(k, v) for k, v in zip(keys, values)]
    return b"".join(records), [len(r) for r in records]


parse_run = native.vlog_parse if native is not None and hasattr(native, "vlog_parse") \
    else parse_run_py
frame_many = native.vlog_frame if native is not None and hasattr(native, "vlog_frame") \
    else frame_many_py
REFUSED = {"past-end": "the record runs past the end of the segment (it ends early)",
           "bad-magic": "bad magic byte", "bad-length": "its lengths do not match the index",
           "bad-crc": "CRC mismatch", "other-key": "the record holds another key"}


class SegmentFile:
    """One open segment file: appends at its end, reads anywhere. Not thread-safe by itself
    (the value log serialises appends; reads use ``pread`` and need no lock)."""

    def __init__(self, directory: Path, segment_id: int) -> None:
        self.id = segment_id
        self.path = directory / segment_name(segment_id)
        # a new segment's name is durable before anything is appended (and acknowledged)
        self.fd = create_durably(self.path, os.O_RDWR, FILE_MODE)
        self._fd_lock = threading.Lock()  # the background sync vs a release's close
        # relocation appends to a long segment off the store lock while a cancel appends a
        # removal record to it under the store lock
        self._append_lock = threading.Lock()
        self.size = os.fstat(self.fd).st_size

    def append(self, data: bytes) -> int:
        """Write ``data`` at the end; returns the offset it starts at."""
        with self._append_lock:
            offset = self.size
            pwrite_all(self.fd, data, offset)
            self.size = offset + len(data)
        return offset

    def read(self, offset: int, length: int) -> bytes:
        return os.pread(self.fd, length, offset)

    def sync(self) -> None:
        with self._fd_lock:  # a release closing it meanwhile waits: never a stale descriptor
            if self.fd >= 0:  # else closed: a released segment (nothing in it was live)
                os.fdatasync(self.fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        self.size = size

    def will_need(self, offset: int, length: int) -> None:
        """Ask the kernel to read a range ahead of its use (prefetch before the due time)."""
        os.posix_fadvise(self.fd, offset, length, os.POSIX_FADV_WILLNEED)

    def drop_cache(self) -> None:
        os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        with self._fd_lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


WINDOW = 8 << 20


def iter_records(seg: SegmentFile, end: int, damaged: list[tuple[int, str]]):
    """Every readable record of ``seg`` below ``end`` as (offset, key, value, length), read in
    ``WINDOW``-sized pieces. A damaged record is reported in ``damaged`` (offset, reason) and
    the walk resumes at the next offset where a whole record checks out: one bad record never
    hides the ones after it."""
    pos = 0
    buf, base = b"", 0  # buf holds the file bytes [base, base + len(buf))
    view = memoryview(buf)
    where = f"vlog segment {seg.path.name}"
    while pos < end:
        need = SIZE
        if pos - base + SIZE <= len(buf) and pos >= base:
            _, key_len, value_len, _ = HEADER.unpack_from(buf, pos - base)
            need = min(SIZE + key_len + value_len, end - pos)
        if pos < base or pos - base + need > len(buf):
            buf, base = seg.read(pos, max(min(WINDOW, end - pos), need)), pos
            view = memoryview(buf)[:end - base]
            if len(buf) < min(SIZE, end - pos):
                damaged.append((pos, f"{where}: file ends at {pos + len(buf)}, the index "
                                     f"covers {end}"))
                return
            if need == SIZE:
                continue  # now the header is in the window: size the record
        try:
            key, value, stop = parse(view, pos - base, where)
        except CorruptRecordError as exc:
            nxt = _resync(seg, pos + 1, end)
            damaged.append((pos, f"{exc}; skipped {nxt - pos} bytes"))
            pos, buf, base = nxt, b"", nxt
            continue
        yield pos, key, value, base + stop - pos
        pos = base + stop


def _resync(seg: SegmentFile, start: int, end: int) -> int:
    """The first offset at or after ``start`` where a whole record checks out (``end`` if none)."""
    pos = start
    while pos < end:
        chunk = seg.read(pos, min(WINDOW, end - pos))
        if not chunk:
            return end
        at = chunk.find(bytes((MAGIC,)))
        while at >= 0:
            candidate = pos + at
            probe = seg.read(candidate, SIZE)
            if len(probe) == SIZE:
                _, key_len, value_len, _ = HEADER.unpack(probe)
                length = SIZE + key_len + value_len
                if candidate + length <= end:
                    try:
                        parse(seg.read(candidate, length), 0, "resync")
                        return candidate
                    except CorruptRecordError:
                        pass
            at = chunk.find(bytes((MAGIC,)), at + 1)
        pos += len(chunk)
    return end
