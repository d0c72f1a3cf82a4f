"""Delivery throughput of the legacy 18-level ScheduleMessageService.

    python -m bench.levels [--per-level N] [--levels L] [--out bench/results/levels.json]

Each scenario parks N messages on each of L levels (levels 1..L of the default table), jumps a
ManualClock past every due time, and times how long the service takes to move them all to their
real topics, so the figure is delivery-bound (CommitLog reads + puts), not wait-bound. Scenarios:

- ``tick``: ``service.tick()`` in a loop (one thread), sync and async delivery;
- ``threads``: ``service.start()`` (one scanner thread per level), sync and async delivery;
- ``single``: one level alone under ``tick``, sync and async.

Writes JSON to ``--out`` and prints a markdown summary.
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path

from legacy_levels.service import ScheduleMessageService
from rocks_timer.clock import ManualClock
from rocks_timer.config import BrokerConfig
from rocks_timer.message import DELAY, REAL_QID, REAL_TOPIC, SCHEDULE_TOPIC, Message
from rocks_timer.message_store import MessageStore

T0_MS = 1_700_000_000_000
BODY = b"b" * 128


def park_all(store: MessageStore, levels: list[int], per_level: int) -> None:
    futures = []
    for i in range(per_level):
        for level in levels:
            msg = Message(topic=SCHEDULE_TOPIC, body=BODY, queue_id=level - 1,
                          properties={REAL_TOPIC: f"bench{level}", REAL_QID: "0",
                                      DELAY: str(level)})
            futures.append(store.put_message_async(msg))
        if len(futures) >= 8_192:
            for future in futures:
                future.result()
            futures.clear()
    for future in futures:
        future.result()


def run_scenario(base: Path, name: str, levels: list[int], per_level: int, *, async_deliver: bool,
                 threads: bool, timeout_s: float = 300.0) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"levels-{name}-", dir=base))
    clock = ManualClock(T0_MS)
    config = BrokerConfig(enable_schedule_async_deliver=async_deliver).validate()
    store = MessageStore.open(root, config, clock)
    service = ScheduleMessageService(root, store, config, clock)
    total = per_level * len(levels)
    level_done_s: dict[int, float] = {}
    try:
        park_all(store, levels, per_level)
        service.load()
        clock.set(T0_MS + config.delay_levels.delay_ms(max(levels)) + 1_000)
        started = time.perf_counter()
        ticks = 0
        if threads:
            service.start()
        deadline = started + timeout_s
        while time.perf_counter() < deadline:
            if threads:
                time.sleep(0.002)
            else:
                service.tick()
                ticks += 1
            elapsed = time.perf_counter() - started
            for level in levels:
                if level not in level_done_s and service.offset(level) >= per_level:
                    level_done_s[level] = elapsed
            if len(level_done_s) == len(levels):
                break
        elapsed_s = time.perf_counter() - started
        service.stop()
        stats = service.stats()
        store_stats = store.stats()
    finally:
        service.close()
        store.close()
        shutil.rmtree(root, ignore_errors=True)
    delivered = stats["delivered"]
    return {
        "scenario": name, "mode": "async" if async_deliver else "sync",
        "driver": "threads" if threads else "tick", "levels": levels, "per_level": per_level,
        "messages": total, "delivered": delivered, "complete": delivered == total,
        "seconds": round(elapsed_s, 4), "msgs_per_s": round(delivered / elapsed_s, 1),
        "ticks": ticks,
        "per_level_msgs_per_s": {str(level): round(per_level / t, 1)
                                 for level, t in sorted(level_done_s.items())},
        "commitlog_groups": store_stats["groups_written"],
        "put_failures": stats["put_failures"], "refused_flow": stats["refused_flow"],
    }


def markdown(results: list[dict], meta: dict) -> str:
    lines = [
        f"### Legacy levels delivery throughput ({meta['per_level']} msgs/level, "
        f"{len(BODY)} B bodies, {meta['python']})",
        "",
        "| scenario | driver | mode | levels | messages | seconds | msgs/s | per level (N / time until the level was done) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        per_level = ", ".join(f"L{k}: {v:,.0f}" for k, v in r["per_level_msgs_per_s"].items())
        lines.append(f"| {r['scenario']} | {r['driver']} | {r['mode']} | "
                     f"{','.join(map(str, r['levels']))} | {r['messages']:,} | {r['seconds']:.2f} | "
                     f"{r['msgs_per_s']:,.0f} | {per_level} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-level", type=int, default=20_000, help="messages per level")
    parser.add_argument("--levels", type=int, default=4, help="levels delivered concurrently")
    parser.add_argument("--out", type=Path, default=Path("bench/results/levels.json"))
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where data dirs go (default: system temp dir)")
    args = parser.parse_args(argv)
    levels = list(range(1, args.levels + 1))
    base = args.work_dir or Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    results = []
    for threads in (False, True):
        for async_deliver in (False, True):
            results.append(run_scenario(base, f"{len(levels)} levels", levels, args.per_level,
                                        async_deliver=async_deliver, threads=threads))
    for async_deliver in (False, True):
        results.append(run_scenario(base, "single level", [1], args.per_level,
                                    async_deliver=async_deliver, threads=False))
    meta = {"per_level": args.per_level, "levels": levels, "body_bytes": len(BODY),
            "python": platform.python_version(), "machine": platform.machine(),
            "work_dir": str(base),
            "command": "python -m bench.levels " + " ".join(argv or [])}
    report = {"meta": meta, "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(markdown(results, meta))
    print(f"\nJSON: {args.out}")
    return report


if __name__ == "__main__":
    main()
