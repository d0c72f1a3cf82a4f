"""Wheel slot pages: the 4 KiB pages of the wheel file that enqueues dirty between two flushes.

The wheel writes a 32-byte slot for every enqueue (a send, and each roll of a message parked
for longer than the window) and flushes the dirty pages once per flush interval, so its slot
bytes are 4 KiB x the distinct (flush interval, page) pairs its enqueues touch. Which pairs
depends on more than the delay distribution: how many enqueues share an interval (the send
rate, and in the benchmarks the simulated clock's step) and where rolls land (all messages
rolled in one interval land together, a window ahead). So the count is simulated from the
messages themselves, with the wheel's own roll rule, instead of fitted as a law of the delays:

- a measured cell: its workload's operations, every enqueue in the interval the benchmark
  harness flushed it in (one simulated second while sending, then the harness's step for the
  workload: ``bench.harness.STEPS_MS``);
- a steady day (the projection): ``rate`` x ``window`` messages with send times spread over the
  window and every one of their enqueues placed at its send time (a steady stream has as many
  k-th enqueues of messages sent k steps earlier in any window as the window has sends), one
  flush a second.
"""
from __future__ import annotations

import numpy as np

ROLL_WINDOW_MS = 2 * 86_400_000
MAX_ROLLS = 40
PAGE_MS = 4096 // 32 * 100  # one page of 32-byte slots at 100 ms precision
SEND_STEP_MS = 1_000


def enqueues(send_ms: np.ndarray, delay_ms: np.ndarray,
             cancel: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(message index, enqueue time, slot time) of every enqueue: the send, then one per roll
    (park W ahead, or W/2 when that overshoots by less than W/3; the last one at the due time).
    A cancelled message is enqueued once (its cancel marker goes to the same slot)."""
    w = ROLL_WINDOW_MS
    index = np.arange(len(send_ms))
    at = send_ms.astype(np.int64)
    rest = delay_ms.astype(np.int64)
    alive = np.ones(len(at), dtype=bool)
    out_i, out_at, out_slot = [], [], []
    for _ in range(MAX_ROLLS + 1):
        if not alive.any():
            break
        i, t, r = index[alive], at[alive], rest[alive]
        parked = (r >= w) & (len(out_i) < MAX_ROLLS)
        step = np.where(r - w < w // 3, w // 2, w)
        slot = np.where(parked, t + step, t + r)
        out_i.append(i)
        out_at.append(t)
        out_slot.append(slot)
        keep = parked & ~cancel[alive]
        at[i[keep]] = slot[keep]
        rest[i[keep]] = r[keep] - step[keep]
        alive[:] = False
        alive[i[keep]] = True
    return np.concatenate(out_i), np.concatenate(out_at), np.concatenate(out_slot)


def distinct_pages(interval: np.ndarray, slot_ms: np.ndarray) -> int:
    """Distinct (flush interval, slot page) pairs."""
    page = slot_ms // PAGE_MS
    pairs = interval.astype(np.int64) * (1 << 32) + (page % (1 << 32))
    return int(len(np.unique(pairs)))


def cell_pages(name: str, messages: int, body_size: int, seed: int, shards: int = 1) -> float:
    """Pages dirtied per message by a measured cell: workload ``name`` of ``messages``
    operations split over ``shards`` stores (operation i in store i mod shards), as the
    benchmark harness drove it."""
    from bench.harness import STEPS_MS
    from bench.workloads import workload
    ops = list(workload(name, messages, body_size, seed))
    send = np.fromiter((op.send_ms for op in ops), dtype=np.int64, count=len(ops))
    delay = np.fromiter((op.delay_ms for op in ops), dtype=np.int64, count=len(ops))
    cancel = np.fromiter((op.cancel for op in ops), dtype=bool, count=len(ops))
    step = STEPS_MS[name][0]
    pages = sum(cell_pages_per_message(send[s::shards], delay[s::shards], cancel[s::shards], step)
                * len(send[s::shards]) for s in range(shards))
    return pages / max(1, len(ops))


def cell_pages_per_message(send_ms: np.ndarray, delay_ms: np.ndarray, cancel: np.ndarray,
                           step_ms: int) -> float:
    """Pages dirtied per message in a benchmark cell: enqueues made while sending flush every
    simulated second, later ones every ``step_ms`` (the harness's clock step)."""
    if len(send_ms) == 0:
        return 0.0
    _, at, slot = enqueues(send_ms, delay_ms, cancel)
    last_send = int(send_ms.max())
    first_after = last_send // SEND_STEP_MS + 1
    interval = np.where(at <= last_send, at // SEND_STEP_MS,
                        first_after + (at - last_send) // step_ms)
    return distinct_pages(interval, slot) / len(send_ms)


def steady_pages_per_message(delay_ms: np.ndarray, cancel: np.ndarray, rate_per_s: float,
                             flush_ms: int = 1_000, seed: int = 7) -> float:
    """Pages dirtied per message in a steady stream of ``rate_per_s`` messages whose delays
    are drawn like ``delay_ms`` (one message per element: len(delay_ms) / rate_per_s seconds of
    sends), one flush every ``flush_ms``."""
    n = len(delay_ms)
    if n == 0:
        return 0.0
    window_ms = n / rate_per_s * 1000
    send = np.random.default_rng(seed).uniform(0, window_ms, n).astype(np.int64)
    index, at, slot = enqueues(np.zeros(n, dtype=np.int64), delay_ms, cancel)
    placed = send[index]  # each enqueue at its message's send time: the stream is steady
    return distinct_pages(placed // flush_ms, placed + slot - at) / n
