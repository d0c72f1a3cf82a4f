"""The wheel slot-page simulation of the scale model (spark/wheel_pages.py): the wheel's own roll
rule, the page counting, and the count against a real wheel cell's flushed slot bytes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.harness import run_cell
from spark import wa_model
from spark import wheel_pages as WP

W = WP.ROLL_WINDOW_MS


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60 * 86_400_000), min_size=1, max_size=50))
def test_each_message_is_enqueued_once_per_roll_plus_once(delays):
    delay = np.array(delays, dtype=np.int64)
    index, at, slot = WP.enqueues(np.zeros(len(delay), dtype=np.int64), delay,
                                  np.zeros(len(delay), dtype=bool))
    counts = np.bincount(index, minlength=len(delay))
    assert counts.tolist() == [1 + wa_model.rolls_for(d) for d in delays]
    for i, d in enumerate(delays):  # the last enqueue is into the due slot, the others park
        mine = np.flatnonzero(index == i)
        assert slot[mine[-1]] == d
        assert all(slot[k] - at[k] in (W, W // 2) for k in mine[:-1])


def test_a_cancelled_message_is_enqueued_once():
    index, _, slot = WP.enqueues(np.array([0]), np.array([10 * 86_400_000]), np.array([True]))
    assert index.tolist() == [0] and slot.tolist() == [W]


def test_pages_are_counted_per_flush_interval():
    # three sends in the first second into one page, one into the next page, one a second later
    send = np.array([0, 100, 900, 999, 1500])
    delay = np.array([60_000, 60_000, 60_100, 60_000 + WP.PAGE_MS, 60_000])
    cancel = np.zeros(5, dtype=bool)
    assert WP.cell_pages_per_message(send, delay, cancel, step_ms=1000) == 3 / 5


def test_a_steady_stream_shares_pages_as_its_rate_grows():
    delay = np.random.default_rng(1).integers(3 * 86_400_000, 30 * 86_400_000, 20_000)
    cancel = np.zeros(len(delay), dtype=bool)
    slow = WP.steady_pages_per_message(delay, cancel, rate_per_s=100)
    fast = WP.steady_pages_per_message(delay, cancel, rate_per_s=100_000)
    assert fast < slow / 2  # measured: 1.01 pages a message at 100/s, 0.39 at 100,000/s


@pytest.mark.parametrize("workload", ["day", "month"])
def test_the_count_matches_a_real_wheel_cell(tmp_path, workload):
    """A real wheel broker driven by the benchmark harness flushes exactly the simulated pages
    (within 2%: a flush interval can straddle one of the harness's clock steps)."""
    row = run_cell("wheel", workload, 2_000, body_size=64, workdir=tmp_path)
    pages = WP.cell_pages(workload, 2_000, 64, 7)
    assert row["wheel_slots"] == pytest.approx(pages * 2_000 * 4096, rel=0.02)  # 0.0%, 1.3%
