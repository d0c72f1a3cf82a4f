"""Binary layouts of the file wheel (RIP-43), big-endian as RocketMQ's ``ByteBuffer``.

Each layout is one ``struct.Struct`` constant with its ``*_SIZE``; the box tables below are the
only description of the bytes. Offsets are in brackets.

Slot (``SLOT``, 32 bytes), one per wheel position in the ``timerwheel`` file::

    +----------------+---------------+---------------+-------------+---------------+
    | [0] time/p  i8 | [8] first  i8 | [16] last  i8 | [24] num i4 | [28] magic i4 |
    +----------------+---------------+---------------+-------------+---------------+

The slot time is stored divided by the precision p; readers multiply it back. ``first``/``last``
are TimerLog positions of the slot's oldest and newest unit; ``num`` may go negative (markers).

TimerLog unit (``UNIT``, 52 bytes), linked backwards per slot through ``prev_pos``::

    +--------------+------------------+---------------+------------------+---------------+
    | [0] size i4  | [4] prev_pos i8  | [12] magic i4 | [16] write_ms i8 | [24] delay i4 |
    +--------------+------------------+---------------+------------------+---------------+
    | [28] commitlog offset i8 | [36] record size i4 | [40] topic hash i4 | [44] reserved i8 |
    +--------------------------+---------------------+--------------------+------------------+

``size`` is always 52; ``write_ms`` is the enqueue write time (floor_p); ``delay`` = slot time -
write_ms; the topic hash is Java ``String.hashCode(REAL_TOPIC)`` (0 without one).

TimerLog blank (``BLANK``, 16 bytes) closes a segment whose remaining space cannot take the next
append plus another blank::

    +------------------+--------------+--------------------------+
    | [0] remaining i4 | [4] zero i8  | [12] 0xCBD43194 u4       |
    +------------------+--------------+--------------------------+

Checkpoint (``CHECKPOINT``, 56 bytes; a legacy 32-byte buffer holds the first four)::

    +-------------------+------------------+-------------------+--------------------+
    | [0] read_time i8  | [8] flush_pos i8 | [16] queue_off i8 | [24] master_off i8 |
    +-------------------+------------------+-------------------+--------------------+
    | [32] state_version i8 | [40] timestamp i8 | [48] counter i8 |
    +-----------------------+-------------------+-----------------+

``queue_off`` is the offset to restart the enqueue from (below any already-due message still
held in memory); ``master_off`` is how far the enqueue had read.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from rocks_timer.record import java_string_hash

__all__ = [
    "SLOT", "SLOT_SIZE", "UNIT", "UNIT_SIZE", "BLANK", "BLANK_MAGIC", "MIN_BLANK_LEN",
    "CHECKPOINT", "CHECKPOINT_SIZE", "LEGACY_CHECKPOINT_SIZE", "MAGIC_DEFAULT", "MAGIC_ROLL",
    "MAGIC_DELETE", "Slot", "Unit", "Checkpoint", "BLANK_SLOT", "java_string_hash",
    "is_magic_ok", "snap_precision", "timer_out_ms", "floor_to", "slots_total_for",
    "effective_roll_window", "TIMER_BLANK_SLOTS", "DAY_MS", "LONG_MAX",
]

SLOT = struct.Struct(">qqqii")
SLOT_SIZE = SLOT.size  # 32
UNIT = struct.Struct(">iqiqiqiiq")
UNIT_SIZE = UNIT.size  # 52
BLANK = struct.Struct(">iqI")
MIN_BLANK_LEN = BLANK.size  # 16
BLANK_MAGIC = 0xCBD43194
CHECKPOINT = struct.Struct(">7q")
CHECKPOINT_SIZE = CHECKPOINT.size  # 56
LEGACY_CHECKPOINT_SIZE = 32

MAGIC_DEFAULT = 1
MAGIC_ROLL = 2
MAGIC_DELETE = 4

TIMER_BLANK_SLOTS = 60
DAY_MS = 86_400_000
LONG_MAX = (1 << 63) - 1


class Slot(NamedTuple):
    """One wheel slot as read back: ``time_ms`` is -1 for a blank or stale slot."""

    time_ms: int
    first_pos: int
    last_pos: int
    num: int
    magic: int


BLANK_SLOT = Slot(-1, -1, -1, 0, 0)


class Unit(NamedTuple):
    """One TimerLog unit (see the box table)."""

    size: int
    prev_pos: int
    magic: int
    write_ms: int
    delay_ms: int
    commitlog_offset: int
    record_size: int
    topic_hash: int
    reserved: int = 0

    @property
    def slot_ms(self) -> int:
        return self.write_ms + self.delay_ms

    def pack(self) -> bytes:
        return UNIT.pack(*self)

    @classmethod
    def unpack(cls, data: bytes | memoryview, offset: int = 0) -> "Unit":
        return cls(*UNIT.unpack_from(data, offset))

    def is_valid(self) -> bool:
        return self.size == UNIT_SIZE and is_magic_ok(self.magic)


@dataclass(frozen=True)
class Checkpoint:
    """The wheel's progress: committed read time, TimerLog flush position, queue offsets, version."""

    read_time_ms: int = 0
    flush_pos: int = 0
    queue_offset: int = 0
    master_queue_offset: int = 0
    state_version: int = 0
    timestamp_ms: int = 0
    counter: int = 0

    def encode(self) -> bytes:
        return CHECKPOINT.pack(self.read_time_ms, self.flush_pos, self.queue_offset,
                               self.master_queue_offset, self.state_version, self.timestamp_ms,
                               self.counter)

    @classmethod
    def decode(cls, data: bytes) -> "Checkpoint":
        if len(data) >= CHECKPOINT_SIZE:
            return cls(*CHECKPOINT.unpack_from(data, 0))
        if len(data) >= LEGACY_CHECKPOINT_SIZE:
            return cls(*struct.unpack_from(">4q", data, 0))
        raise ValueError(f"checkpoint of {len(data)} bytes is shorter than "
                         f"{LEGACY_CHECKPOINT_SIZE}")


def is_magic_ok(magic: int) -> bool:
    """RocketMQ's ``(m | 0xF) == 0xF``: the low four bits only."""
    return 0 <= magic <= 0xF


def snap_precision(precision_ms: int) -> int:
    """RocketMQ's precision setter: <200 -> 100, <500 -> 200, <1000 -> 500, else 1000."""
    if precision_ms < 200:
        return 100
    if precision_ms < 500:
        return 200
    if precision_ms < 1000:
        return 500
    return 1000


def floor_to(t_ms: int, p: int) -> int:
    return t_ms - t_ms % p


def timer_out_ms(deliver_ms: int, p: int) -> int:
    """TIMER_OUT_MS for a deliver time D: D - p on a multiple of p, else D rounded down.

    The dequeuer reads slot T only once floor_p(now) > T, so the message is never early.
    """
    return deliver_ms - p if deliver_ms % p == 0 else deliver_ms - deliver_ms % p


def slots_total_for(p: int) -> int:
    """Seven days of slots at precision p; the wheel holds twice that."""
    return 7 * DAY_MS // p


def effective_roll_window(configured: int | None, p: int, slots_total: int) -> int:
    """Roll window W in slots: 2 days unless configured; out of [2, S - 60] means S - 60."""
    window = 2 * DAY_MS // p if configured is None else configured
    if window < 2 or window > slots_total - TIMER_BLANK_SLOTS:
        return slots_total - TIMER_BLANK_SLOTS
    return window
