"""Due counts of the file wheel from its own slot counts (``num`` of each slot).

The wheel has no index by due time other than its slots, so the counts are what its slots say:
a message parked for a roll counts at its parking slot (not at its final due time), a slot's
``num`` goes down when a delete marker lands in it, and slots behind the claim position (being
delivered) are not counted. Messages sent but not yet enqueued into the wheel, and expired
ones waiting for delivery, count as due now (a count first enqueues what it can, as ``scan``
does). Only the wheel's horizon (2 x slots_total slots
from the claim position) exists; a range beyond it counts 0.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from rocks_timer.timer.histogram import check_bounds
from rocks_timer.timer.wheel.state import WheelState
from rocks_timer.timer.wheel.timerwheel import TimerWheel

BASIS = "wheel slot time (rolled messages at their parking slot)"


def count_slots(wheel: TimerWheel, state: WheelState, ranges: Sequence[tuple[int | None, int | None]],
                not_in_slots: int = 0) -> list[int]:
    """Sum of slot ``num`` over slots with time in [lo, hi) from the claim position;
    ``not_in_slots`` (backlog, expired) counts as due just before the claim position."""
    check_bounds(ranges)
    p = state.precision_ms
    start = state.claim_time_ms
    horizon = start + wheel.wheel_slots * p
    out = []
    for lo, hi in ranges:
        a = start if lo is None else max(lo, start)
        b = horizon if hi is None else min(hi, horizon)
        total = 0
        if b > a:
            first = a - a % p
            first = first if first >= a else first + p  # slot times are multiples of p
            count = max(0, -(-(b - first) // p))
            for _t, view, valid in wheel.valid_runs(first, count):
                total += int(view["num"][valid].astype(np.int64).sum())
        if (lo is None or lo < start) and (hi is None or hi >= start):
            total += not_in_slots  # due now: counted just before the claim position
        out.append(total)
    return out
