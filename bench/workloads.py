"""Seeded, shardable, named workloads for the write-amplification and tuning benchmarks
(docs/WRITE_AMPLIFICATION.md, definitions).

A workload is a deterministic stream of ``SendOp``: operation i is sent ``send_ms`` = i / rate
after the start of the run (simulated time ``t0``; producers send at a steady ``rate_per_s``,
default 1,000 messages per simulated second) and becomes due ``delay_ms`` after its send. The stream depends only on
(name, messages, body size, seed); ``shard(i, n)`` keeps the operations whose index is ``i`` mod
``n``, so the shards of a workload together are the workload, each operation exactly once.

| name     | delays                                   | notes                                        |
|----------|------------------------------------------|----------------------------------------------|
| short    | 1 s .. 1 h, log-uniform                  | most delays are short, as for retries        |
| day      | 1 h .. 2 days, uniform                   | inside the wheel's default 2-day roll window |
| month    | 3 .. 30 days, uniform                    | forces wheel rolls and CommitLog expiry;     |
|          |                                          | needs timer_max_delay_sec >= 31 days         |
| burst    | all due inside one second, 60 s after    | the "10 million due at once" shape           |
|          | the last send                            |                                              |
| cancel   | 1 min .. 1 h, uniform; 30% cancelled     | cancels are issued right after sending       |
| levels   | one of the 18 default level delays       | level 1..18 uniform; for the levels engine,  |
|          |                                          | and for timer engines as equal delays        |

Bodies are seeded pseudo-random (incompressible) bytes: lz4 in the RocksDB store cannot shrink
them, so no engine is flattered by compressible payloads.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable, Iterator

from rocks_timer.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevelTable

SECOND_MS = 1_000
MINUTE_MS = 60 * SECOND_MS
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS
BODY_SIZES = (128, 1024, 4096)
DEFAULT_BODY_SIZE = 1024
TOPICS = ("orders", "payments", "reminders", "retries")
CANCEL_FRACTION = 0.30
LEVEL_DELAYS_MS = DelayLevelTable.parse(DEFAULT_DELAY_LEVELS).delays_ms
MONTH_MAX_DELAY_SEC = 31 * 86_400
DEFAULT_RATE_PER_S = 1_000
_BODY_POOL = 64


@dataclass(frozen=True, slots=True)
class SendOp:
    """One send of a workload: sent ``send_ms`` after the start, due ``delay_ms`` after its send
    (``due_ms`` after the start), to ``topic``, ``body_size`` bytes, cancelled right after its
    send if ``cancel``; ``level`` > 0 names the legacy delay level whose delay equals
    ``delay_ms`` (0: not level-shaped)."""

    index: int
    send_ms: int
    delay_ms: int
    topic: str
    body_size: int
    cancel: bool
    level: int
    msg_id: str

    @property
    def due_ms(self) -> int:
        return self.send_ms + self.delay_ms


def _log_uniform(rng: random.Random, low_ms: int, high_ms: int) -> int:
    return int(math.exp(rng.uniform(math.log(low_ms), math.log(high_ms))))


def _short(rng: random.Random) -> tuple[int, bool, int]:
    return _log_uniform(rng, SECOND_MS, HOUR_MS), False, 0


def _day(rng: random.Random) -> tuple[int, bool, int]:
    return rng.randint(HOUR_MS, 2 * DAY_MS), False, 0


def _month(rng: random.Random) -> tuple[int, bool, int]:
    return rng.randint(3 * DAY_MS, 30 * DAY_MS), False, 0


def _burst(rng: random.Random) -> tuple[int, bool, int]:
    # an offset inside the burst second; Workload turns it into a delay from the send time
    return rng.randrange(SECOND_MS), False, 0


def _cancel(rng: random.Random) -> tuple[int, bool, int]:
    return rng.randint(MINUTE_MS, HOUR_MS), rng.random() < CANCEL_FRACTION, 0


def _levels(rng: random.Random) -> tuple[int, bool, int]:
    level = rng.randint(1, len(LEVEL_DELAYS_MS))
    return LEVEL_DELAYS_MS[level - 1], False, level


@dataclass(frozen=True)
class WorkloadSpec:
    """A named delay distribution: ``draw(rng) -> (delay_ms, cancel, level)``; ``low_ms`` and
    ``high_ms`` bound every delay it draws."""

    name: str
    draw: Callable[[random.Random], tuple[int, bool, int]]
    low_ms: int
    high_ms: int | None  # None: depends on the send window (burst)
    description: str
    level_shaped: bool = False
    max_delay_sec: int | None = None  # BrokerConfig.timer_max_delay_sec the workload needs


SPECS: dict[str, WorkloadSpec] = {s.name: s for s in (
    WorkloadSpec("short", _short, SECOND_MS, HOUR_MS, "delays 1 s .. 1 h, log-uniform"),
    WorkloadSpec("day", _day, HOUR_MS, 2 * DAY_MS, "delays 1 h .. 2 days, uniform"),
    WorkloadSpec("month", _month, 3 * DAY_MS, 30 * DAY_MS, "delays 3 .. 30 days, uniform",
                 max_delay_sec=MONTH_MAX_DELAY_SEC),
    WorkloadSpec("burst", _burst, MINUTE_MS, None,
                 "all due within one second, 60 s after the last send"),
    WorkloadSpec("cancel", _cancel, MINUTE_MS, HOUR_MS,
                 "delays 1 min .. 1 h, uniform; 30% cancelled after sending"),
    WorkloadSpec("levels", _levels, LEVEL_DELAYS_MS[0], LEVEL_DELAYS_MS[-1],
                 "the 18 default level delays, level uniform", level_shaped=True),
)}
WORKLOAD_NAMES = tuple(SPECS)


class Workload:
    """The operations of one named workload (all of them, or one shard)."""

    def __init__(self, name: str, messages: int, body_size: int = DEFAULT_BODY_SIZE,
                 seed: int = 7, shard_index: int = 0, shards: int = 1,
                 rate_per_s: int = DEFAULT_RATE_PER_S, delay_divisor: int = 1):
        if name not in SPECS:
            raise ValueError(f"workload {name!r} is unknown; valid: {', '.join(WORKLOAD_NAMES)}")
        if messages < 0:
            raise ValueError(f"messages={messages} must be >= 0")
        if body_size < 0:
            raise ValueError(f"body_size={body_size} must be >= 0")
        if shards < 1 or not 0 <= shard_index < shards:
            raise ValueError(f"shard {shard_index} of {shards} is invalid")
        if rate_per_s < 1:
            raise ValueError(f"rate_per_s={rate_per_s} must be >= 1")
        if delay_divisor < 1:
            raise ValueError(f"delay_divisor={delay_divisor} must be >= 1")
        self.rate_per_s = rate_per_s
        # the real broker's scaled cells (bench/rocketmq/compare.py) divide every delay by k;
        # the same draws divided the same way let a model run the very cell the broker ran
        self.delay_divisor = delay_divisor
        self.spec = SPECS[name]
        self.name, self.messages, self.body_size, self.seed = name, messages, body_size, seed
        self.shard_index, self.shards = shard_index, shards

    def shard(self, index: int, count: int) -> "Workload":
        """Shard ``index`` of ``count`` of the whole workload (operation i goes to i mod count)."""
        if self.shards != 1:
            raise ValueError("shard() splits a whole workload, not a shard")
        return Workload(self.name, self.messages, self.body_size, self.seed, index, count,
                        self.rate_per_s, self.delay_divisor)

    def send_ms(self, index: int) -> int:
        """When operation ``index`` is sent, in ms after the start."""
        return index * 1000 // self.rate_per_s

    @property
    def send_window_ms(self) -> int:
        """When the last operation is sent, in ms after the start."""
        return self.send_ms(max(0, self.messages - 1))

    @property
    def level_shaped(self) -> bool:
        return self.spec.level_shaped

    @property
    def max_delay_sec(self) -> int | None:
        return self.spec.max_delay_sec

    def __len__(self) -> int:
        """How many operations this shard yields."""
        if self.messages <= self.shard_index:
            return 0
        return (self.messages - 1 - self.shard_index) // self.shards + 1

    def __iter__(self) -> Iterator[SendOp]:
        # one stream for the whole workload; a shard skips the others' operations, so every
        # shard sees the same draws whatever the shard count
        rng = random.Random(f"{self.name}:{self.seed}")
        draw, size = self.spec.draw, self.body_size
        burst_at_ms = self.send_window_ms + MINUTE_MS
        for index in range(self.messages):
            delay_ms, cancel, level = draw(rng)
            if self.delay_divisor > 1:
                delay_ms = max(1, delay_ms // self.delay_divisor)
            topic = TOPICS[rng.randrange(len(TOPICS))]
            msg_id = f"{rng.getrandbits(128):032X}"
            if index % self.shards == self.shard_index:
                send_ms = self.send_ms(index)
                if self.name == "burst":
                    delay_ms = burst_at_ms + delay_ms - send_ms
                yield SendOp(index, send_ms, delay_ms, topic, size, cancel, level, msg_id)

    def body(self, op: SendOp) -> bytes:
        """The body of ``op``: one of a small pool of seeded random bodies of its size."""
        pool = _body_pool(self.seed, op.body_size)
        return pool[op.index % len(pool)]

    def __repr__(self) -> str:
        return (f"Workload({self.name!r}, messages={self.messages}, body_size={self.body_size}, "
                f"seed={self.seed}, shard={self.shard_index}/{self.shards})")


_POOLS: dict[tuple[int, int], tuple[bytes, ...]] = {}


def _body_pool(seed: int, size: int) -> tuple[bytes, ...]:
    key = (seed, size)
    if key not in _POOLS:
        rng = random.Random(f"bodies:{seed}:{size}")
        _POOLS[key] = tuple(rng.randbytes(size) for _ in range(_BODY_POOL))
    return _POOLS[key]


def workload(name: str, messages: int, body_size: int = DEFAULT_BODY_SIZE, seed: int = 7,
             rate_per_s: int = DEFAULT_RATE_PER_S) -> Workload:
    return Workload(name, messages, body_size, seed, rate_per_s=rate_per_s)


def fits_levels(name: str) -> bool:
    """True if every delay of workload ``name`` is a legacy level delay."""
    return SPECS[name].level_shaped


__all__ = ["BODY_SIZES", "CANCEL_FRACTION", "DEFAULT_BODY_SIZE", "DEFAULT_RATE_PER_S", "LEVEL_DELAYS_MS", "SPECS",
           "SendOp", "TOPICS", "WORKLOAD_NAMES", "Workload", "WorkloadSpec", "fits_levels",
           "workload"]
