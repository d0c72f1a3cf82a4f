"""The due-time histogram: how many pending timer messages fall due when.

Engine-neutral: it asks a ``TimerStore`` for ``count_due`` over whole-second ranges, which
every engine answers from counters it keeps anyway (RocksDB: counters per due second, hour and
day in the same batches as the keys; wheel: its slot counts; memory: a walk, as the reference).

Buckets are disjoint and measured from ``t0`` = now rounded up to the whole second:

    now      due before t0 (already due, being delivered, or due within this second)
    minute   [t0, t0 + 1 min)      hour  [t0 + 1 min, t0 + 1 h)    day  [t0 + 1 h, t0 + 1 d)
    week     [t0 + 1 d, t0 + 7 d)  later [t0 + 7 d, ...)

and per UTC day for a chosen range of days (``days`` entries from ``first_day_ms``).
"""
from __future__ import annotations

import datetime as dt
from typing import Any, Iterable, Sequence

MINUTE_MS, HOUR_MS, DAY_MS, WEEK_MS = 60_000, 3_600_000, 86_400_000, 604_800_000
BUCKETS = (("now", None, 0), ("minute", 0, MINUTE_MS), ("hour", MINUTE_MS, HOUR_MS),
           ("day", HOUR_MS, DAY_MS), ("week", DAY_MS, WEEK_MS), ("later", WEEK_MS, None))
DEFAULT_DAYS = 7
MAX_DAYS = 400

Range = tuple[int | None, int | None]


def check_bounds(ranges: Sequence[Range]) -> None:
    """Bounds must be whole seconds (the granularity every engine counts at)."""
    for lo, hi in ranges:
        for bound in (lo, hi):
            if bound is not None and (not isinstance(bound, int) or bound % 1000):
                raise ValueError(f"due range bound {bound!r} ms is not a whole second")


def count_in_memory(dues: Iterable[int], ranges: Sequence[Range]) -> list[int]:
    """Brute-force counts (the memory reference store)."""
    check_bounds(ranges)
    dues = list(dues)
    return [sum(1 for d in dues if (lo is None or d >= lo) and (hi is None or d < hi))
            for lo, hi in ranges]


def day_start_ms(t_ms: int) -> int:
    return t_ms // DAY_MS * DAY_MS


def iso_day(t_ms: int) -> str:
    return dt.datetime.fromtimestamp(t_ms / 1000, dt.timezone.utc).date().isoformat()


def due_histogram(store: Any, now_ms: int, first_day_ms: int | None = None,
                  days: int = DEFAULT_DAYS) -> dict[str, Any]:
    """Bucket counts and per-day counts (``days`` UTC days from the day of ``first_day_ms``,
    default today). Exact for the RocksDB and memory engines; the wheel counts its slots."""
    if not 0 <= days <= MAX_DAYS:
        raise ValueError(f"days={days} is outside 0..{MAX_DAYS}")
    t0 = -(-now_ms // 1000) * 1000
    ranges: list[Range] = [(None if lo is None else t0 + lo, None if hi is None else t0 + hi)
                           for _, lo, hi in BUCKETS]
    day0 = day_start_ms(now_ms if first_day_ms is None else first_day_ms)
    ranges += [(day0 + i * DAY_MS, day0 + (i + 1) * DAY_MS) for i in range(days)]
    counts = store.count_due(ranges)
    return {
        "from_ms": t0,
        "basis": store.due_basis,
        "buckets": {name: counts[i] for i, (name, _, _) in enumerate(BUCKETS)},
        "days": [{"day": iso_day(lo), "from_ms": lo, "count": c}
                 for (lo, _), c in zip(ranges[len(BUCKETS):], counts[len(BUCKETS):])],
    }


def bound_counts(store: Any, now_ms: int, bounds_s: Sequence[int]) -> dict[int | None, int]:
    """Pending counts between consecutive due bounds (seconds from ``t0``, now rounded up to the
    whole second): bound b counts [previous bound, b), the first from the past; None counts
    from the last bound on. Disjoint, adding up to the pending count."""
    if list(bounds_s) != sorted(set(bounds_s)) or any(b <= 0 for b in bounds_s):
        raise ValueError(f"bounds {list(bounds_s)} must be increasing whole seconds > 0")
    t0 = -(-now_ms // 1000) * 1000
    edges = [t0 + b * 1000 for b in bounds_s]
    ranges: list[Range] = list(zip([None, *edges], [*edges, None]))
    counts = store.count_due(ranges)
    return dict(zip([*bounds_s, None], counts))
