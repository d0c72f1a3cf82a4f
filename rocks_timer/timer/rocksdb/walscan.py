"""A raw reading of RocksDB WAL files, for naming what a repair could not recover (issue 30).

RocksDB's salvage of a WAL with a damaged record in the middle skips the damaged record (and
what shares its block); the messages those records stored are then lost in an ``inline`` store.
This reader walks the same files without trusting checksums: it reassembles the log's physical
records (32 KiB blocks; 7-byte headers, 11 bytes for recyclable logs), parses each write batch
as far as its bytes make sense, and replays the puts, deletes and range deletes of keys that
look like timer keys carrying a decodable message. What is still put at the end, and missing
from the salvaged index, was lost: it is named, never restored (bytes that fail their checksum
are not trusted to be what was acknowledged).

Only for reporting; it never writes. The format is RocksDB's ``log_format.h`` and
``write_batch.cc``, read from their documentation.
"""
from __future__ import annotations

import bisect
import struct
from pathlib import Path

from rocks_timer.errors import RocksTimerError
from rocks_timer.timer import keys as K
from rocks_timer.timer.values import peek_value

BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
RECYCLED = 4  # recyclable types are the plain ones + 4, with a 4-byte log number more
_HEADER = struct.Struct("<IHB")
# write batch record tags (write_batch.cc / dbformat.h)
VALUE, DELETION, SINGLE_DELETION, MERGE, LOG_DATA = 0x1, 0x0, 0x7, 0x2, 0x3
CF_VALUE, CF_DELETION, CF_SINGLE_DELETION, CF_MERGE = 0x5, 0x4, 0x8, 0x6
RANGE_DELETION, CF_RANGE_DELETION, NOOP = 0xF, 0xE, 0xD


class WalScan:
    """Replays the timer keys of some WAL files (in file order)."""

    def __init__(self, files: list[Path]) -> None:
        self.files = files
        self.puts: dict[bytes, tuple[int, bytes]] = {}  # key -> (position, value)
        self.deleted: dict[bytes, int] = {}
        self.ranges: list[tuple[bytes, bytes, int]] = []
        self._pos = 0

    def run(self) -> None:
        for file in self.files:
            try:
                data = file.read_bytes()
            except OSError:
                continue
            for payload in _logical_records(data):
                self._batch(payload)

    def final_puts(self) -> dict[bytes, bytes]:
        """Timer key -> value of every key whose last readable operation is a put."""
        out = {}
        ranges = sorted(self.ranges)
        begins = [r[0] for r in ranges]
        for key, (pos, value) in self.puts.items():
            if self.deleted.get(key, -1) > pos:
                continue
            i = bisect.bisect_right(begins, key)
            if any(end > key and at > pos for _, end, at in ranges[:i]):
                continue
            out[key] = value
        return out

    def _batch(self, payload: bytes) -> None:
        pos = 12  # sequence (8) and count (4)
        try:
            while pos < len(payload):
                self._pos += 1
                tag = payload[pos]
                pos += 1
                if tag in (CF_VALUE, CF_DELETION, CF_SINGLE_DELETION, CF_MERGE,
                           CF_RANGE_DELETION):
                    _, pos = _varint(payload, pos)
                if tag in (VALUE, CF_VALUE, MERGE, CF_MERGE):
                    key, pos = _string(payload, pos)
                    value, pos = _string(payload, pos)
                    if tag in (VALUE, CF_VALUE) and _is_timer_entry(key, value):
                        self.puts[key] = (self._pos, value)
                elif tag in (DELETION, CF_DELETION, SINGLE_DELETION, CF_SINGLE_DELETION):
                    key, pos = _string(payload, pos)
                    self.deleted[key] = self._pos
                elif tag in (RANGE_DELETION, CF_RANGE_DELETION):
                    begin, pos = _string(payload, pos)
                    end, pos = _string(payload, pos)
                    self.ranges.append((begin, end, self._pos))
                elif tag == LOG_DATA:
                    _, pos = _string(payload, pos)
                elif tag == NOOP:
                    continue
                else:
                    return  # unknown or damaged: the rest of this batch is unreadable
        except (IndexError, ValueError):
            return


def _logical_records(data: bytes):
    pending: list[bytes] | None = None
    for block_start in range(0, len(data), BLOCK):
        pos, end = block_start, min(block_start + BLOCK, len(data))
        while end - pos >= _HEADER.size:
            _, length, kind = _HEADER.unpack_from(data, pos)
            header = _HEADER.size
            if kind > RECYCLED and kind <= RECYCLED + LAST:
                kind -= RECYCLED
                header += 4
            if kind == 0 and length == 0:
                break  # padding or zeroed bytes: the rest of the block
            start = pos + header
            if kind not in (FULL, FIRST, MIDDLE, LAST) or start + length > end:
                pending = None
                break
            fragment = data[start:start + length]
            pos = start + length
            if kind == FULL:
                pending = None
                yield fragment
            elif kind == FIRST:
                pending = [fragment]
            elif pending is not None:
                pending.append(fragment)
                if kind == LAST:
                    yield b"".join(pending)
                    pending = None


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise ValueError("varint too long")


def _string(buf: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = _varint(buf, pos)
    if pos + n > len(buf):
        raise ValueError("string past the end")
    return buf[pos:pos + n], pos + n


def _is_timer_entry(key: bytes, value: bytes) -> bool:
    try:
        K.decode_key(key)
        peek_value(key, value)
    except RocksTimerError:
        return False
    return True
