"""Lateness with a cold backlog (issue `vlog`, acceptance 3): gigabytes pending in the vlog
layout, the page cache dropped, then a steady rate of messages falling due on the real clock.

    python -m bench.cold_backlog --gb 5 --rate 5000 --seconds 30

The backlog is scheduled first (bodies of 1 KiB incompressible bytes, most due days later);
``rate x seconds`` of them are due inside the measured window and are scattered through the
arrival order, so their bodies lie all over the value segments: each delivery is a random read
of a cold segment unless the prefetch (``vlog_prefetch_ms``) brought it in. Before the window
every file is synced and the page cache is dropped (``/proc/sys/vm/drop_caches`` when writable,
and ``POSIX_FADV_DONTNEED`` on every value segment in any case); the result says which.

The broker runs on a real clock shifted so the window starts a few seconds after the drop: time
passes at the real rate, only the epoch is moved (building the backlog takes minutes).
Lateness = store time of the delivered copy - its due time (``TIMER_DELIVER_MS``).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

from bench.common import peak_rss_mb, percentile, scratch_dir, write_result
from rocks_timer import Broker, BrokerConfig, Message
from rocks_timer.message import TIMER_DELIVER_MS
from rocks_timer.timer.store import TimerRecord

DAY_MS = 86_400_000
CHUNK = 10_000
BODY = 1024


class ShiftedClock:
    """The system clock plus a settable offset: real-rate time at a chosen epoch."""

    def __init__(self) -> None:
        self.shift_ms = 0

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.shift_ms


def drop_page_cache(broker: Broker, system_wide: bool = True) -> bool:
    """Sync and drop the page cache; True if the kernel-wide drop was done (allowed)."""
    os.sync()
    broker.timer.drop_caches()
    if not system_wide:
        return False
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def run(gb: float, rate: int, seconds: int, seed: int = 5, lead_ms: int = 3_000,
        system_wide_drop: bool = True) -> dict:
    rng = random.Random(seed)
    pool = [rng.randbytes(BODY) for _ in range(256)]
    total = int(gb * 1e9 / (BODY + 80))
    window = rate * seconds
    clock = ShiftedClock()
    with scratch_dir(prefix="cold-") as d:
        config = BrokerConfig(rocksdb_layout="vlog", timer_max_delay_sec=40 * 86_400)
        broker = Broker.open(d / "b", config, clock=clock)
        base = clock.now_ms()
        w0 = base + 10 * DAY_MS  # the window's first due time (epoch shifted there later)
        picks = set(rng.sample(range(total), window))
        slot = 0
        started = time.monotonic()
        for start in range(0, total, CHUNK):
            chunk = []
            for i in range(start, min(total, start + CHUNK)):
                if i in picks:
                    due, topic = w0 + (slot * 1000) // rate, "cold"
                    slot += 1
                else:
                    due, topic = w0 + DAY_MS + rng.randrange(20 * DAY_MS), "later"
                chunk.append(TimerRecord(due, Message(
                    topic, pool[i % 256], msg_id=f"C{i:031X}",
                    properties={TIMER_DELIVER_MS: str(due)})))
            broker.timer.schedule(chunk, base)
        build_s = time.monotonic() - started
        broker.timer.flush()
        pending_bytes = broker.timer.stats().extra.get("vlog_live_bytes", 0)
        dropped = drop_page_cache(broker, system_wide_drop)
        clock.shift_ms = (w0 - lead_ms) - (time.time_ns() // 1_000_000)
        broker.start()
        deadline = time.monotonic() + lead_ms / 1000 + seconds + 60
        while broker.max_offset("cold") < window and time.monotonic() < deadline:
            time.sleep(0.1)
        late, offset = [], 0
        while page := broker.pull("cold", 0, offset, 5000):
            late.extend(m.store_ms - int(m.properties[TIMER_DELIVER_MS]) for m in page)
            offset = page[-1].queue_offset + 1
        broker.close()
    return {"pending_gb": round(pending_bytes / 1e9, 2), "messages": total, "window": window,
            "rate_per_s": rate, "seconds": seconds, "build_s": round(build_s, 1),
            "page_cache_dropped": dropped, "delivered": len(late),
            "p50_ms": percentile(late, 50), "p99_ms": percentile(late, 99),
            "max_ms": max(late) if late else None, "early": sum(1 for x in late if x < 0),
            "peak_rss_mb": round(peak_rss_mb(), 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cold_backlog", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=5.0)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--results-dir", type=Path, default=None)
    parser.add_argument("--no-system-drop", action="store_true",
                        help="only evict the value segments (the smoke test: leave others' cache)")
    args = parser.parse_args(argv)
    result = run(args.gb, args.rate, args.seconds, system_wide_drop=not args.no_system_drop)
    path = write_result("cold_backlog", {"args": vars(args) | {"results_dir": None}, **result},
                        args.results_dir)
    print(json.dumps(result, indent=2))
    print(f"results: {path}")
    ok = result["early"] == 0 and result["delivered"] == result["window"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
