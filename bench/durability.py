"""What each durability mode costs (``flush_disk_type``, ARCHITECTURE §4): sends per second through
``Broker.send`` on a running broker (``start()``, so the async mode's periodic flush runs in the
background as it would in production), and timer deliveries per second.

    python -m bench.durability [--messages 20000] [--sync-messages 2000] [--body 512] [--runs 3]

Variants, each on a fresh data dir, in both modes (``async``: fsync every ``flush_interval_ms``;
``sync``: every send on disk before it returns):
- ``timer_single``: one timer message per ``send`` (RocksDB engine, default layout), delay 1 h;
- ``timer_batch100``: ``send_batch`` of 100 timer messages;
- ``immediate_single``: one message per ``send`` stored at once (CommitLog only);
- ``deliver``: timer messages already due, delivered by ``tick()`` until none is left (the
  deliverer fdatasyncs the CommitLog before the store forgets what it delivered).
Sync mode sends fewer messages (``--sync-messages``): each costs an fsync or two. Rounds are
interleaved (every variant once per round) so each meets the same machine state; the median of
the rounds is reported, and ``sync_vs_async`` is the ratio of the two modes' medians.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from bench.common import median, scratch_dir, settled_gc, write_result
from rocks_timer import Broker, BrokerConfig, ManualClock, Message

MODES = ("async", "sync")
HOUR_MS = 3_600_000


def _config(mode: str) -> BrokerConfig:
    return BrokerConfig(flush_disk_type=mode).validate()


def _bodies(body: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(body) for _ in range(64)]


def _timed_sends(mode: str, n: int, bodies: list[bytes], batch: int, delay_ms: int | None
                 ) -> tuple[float, int]:
    with scratch_dir(prefix=f"durability-{mode}-") as d:
        with Broker.open(d / "data", _config(mode)) as broker:
            broker.start()
            messages = [Message("bench", bodies[i % len(bodies)]) for i in range(n)]
            with settled_gc():
                start = time.perf_counter()
                for i in range(0, n, batch):
                    broker.send_batch(messages[i:i + batch], delay_ms=delay_ms)
                elapsed = time.perf_counter() - start
            syncs = broker.messages.commitlog.syncs
    return elapsed, syncs


def timer_single(mode, n, bodies):
    return _timed_sends(mode, n, bodies, 1, HOUR_MS)


def timer_batch100(mode, n, bodies):
    return _timed_sends(mode, n, bodies, 100, HOUR_MS)


def immediate_single(mode, n, bodies):
    return _timed_sends(mode, n, bodies, 1, None)


def deliver(mode, n, bodies):
    """Schedule ``n`` messages 1 s ahead under a manual clock, then time the ticks that deliver
    them all once they are due."""
    clock = ManualClock(1_767_225_600_000)
    with scratch_dir(prefix=f"durability-{mode}-") as d:
        with Broker.open(d / "data", _config(mode), clock=clock) as broker:
            for i in range(0, n, 1000):
                broker.send_batch([Message("bench", bodies[j % len(bodies)])
                                   for j in range(i, min(n, i + 1000))], delay_ms=1_000)
            clock.advance(1_000)
            syncs_before = broker.messages.commitlog.syncs
            delivered = 0
            with settled_gc():
                start = time.perf_counter()
                for _ in range(100_000):
                    moved = broker.tick()
                    delivered += moved
                    if delivered >= n:
                        break
                elapsed = time.perf_counter() - start
            if delivered < n:
                raise RuntimeError(f"delivered {delivered} of {n}")
            syncs = broker.messages.commitlog.syncs - syncs_before
    return elapsed, syncs


VARIANTS = {"timer_single": timer_single, "timer_batch100": timer_batch100,
            "immediate_single": immediate_single, "deliver": deliver}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.durability", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000, help="per variant, async mode")
    parser.add_argument("--sync-messages", type=int, default=2_000, help="per variant, sync")
    parser.add_argument("--body", type=int, default=512)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--results-dir", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    bodies = _bodies(args.body, args.seed)
    counts = {"async": args.messages, "sync": args.sync_messages}
    times: dict[tuple[str, str], list[float]] = {}
    syncs: dict[tuple[str, str], int] = {}
    for _ in range(args.runs):
        for name, run in VARIANTS.items():
            for mode in MODES:
                elapsed, syncs[(name, mode)] = run(mode, counts[mode], bodies)
                times.setdefault((name, mode), []).append(elapsed)
    rows: dict[str, dict] = {}
    for name in VARIANTS:
        row = {}
        for mode in MODES:
            t = median(times[(name, mode)])
            row[mode] = {"messages": counts[mode], "seconds": round(t, 4),
                         "runs": [round(x, 4) for x in times[(name, mode)]],
                         "msgs_per_s": round(counts[mode] / t),
                         "commitlog_sync_rounds": syncs[(name, mode)]}
        row["sync_vs_async"] = round(row["sync"]["msgs_per_s"] / row["async"]["msgs_per_s"], 4)
        rows[name] = row
    path = write_result("durability", {"body_bytes": args.body, "runs": args.runs,
                                       "flush_interval_ms": BrokerConfig().flush_interval_ms,
                                       "variants": rows}, args.results_dir)
    print("| variant | async msgs/s | sync msgs/s | sync / async |\n|---|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {row['async']['msgs_per_s']:,} | {row['sync']['msgs_per_s']:,} | "
              f"{row['sync_vs_async']:.3f} |")
    print(f"results: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
