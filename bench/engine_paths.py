"""The RocksDB engine's own hot paths, per CPU second of the calling thread: what the store's
code costs, apart from the broker around it and from neighbours on the machine (a thread's CPU
time does not count the time it waits for a core).

    python -m bench.engine_paths [--messages 20000] [--runs 5]

For each layout: ``RocksTimerStore.schedule`` of single records, of batches of 100, of batches
of 100 whose messages carry a business key, then the claim and completion of everything
(``claim_due`` of 4,096 and ``complete``, as the deliverer does). 1 KiB bodies, due within an
hour, two topics. Each round opens a fresh store; variants interleave round by round; figures
are medians (msg per thread-CPU second, and per wall second beside). Results:
bench/results/engine_paths.json; a markdown summary is printed. ``bench.ab`` runs it on two
checkouts (it uses only the store's public methods, so it runs on older ones too).
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from bench.common import median, scratch_dir, settled_gc, write_result
from rocks_timer import BrokerConfig, Message
from rocks_timer.timer.rocksdb import RocksTimerStore
from rocks_timer.timer.store import TimerRecord

T0 = 1_767_225_600_000
LAYOUTS = ("inline", "vlog")
CASES = (("single", 1, False), ("batch100", 100, False), ("keyed_batch100", 100, True))


def records(n: int, seed: int, keyed: bool) -> list[TimerRecord]:
    rng = random.Random(seed)
    pool = [rng.randbytes(1024) for _ in range(64)]
    return [TimerRecord(T0 + 1000 + rng.randrange(3_600_000),
                        Message(("orders", "billing")[i % 2], pool[i % 64],
                                msg_id=f"{seed:08X}{i:024X}",
                                keys=(f"order-{seed}-{i}",) if keyed else ()))
            for i in range(n)]


def one_round(layout: str, batch: int, keyed: bool, n: int, seed: int) -> dict[str, float]:
    recs = records(n, seed, keyed)
    with scratch_dir(prefix="engine-paths-") as d:
        store = RocksTimerStore.open(d / "s", BrokerConfig(rocksdb_layout=layout))
        with settled_gc():
            wall, cpu = time.perf_counter(), time.thread_time()
            for i in range(0, n, batch):
                store.schedule(recs[i:i + batch], T0)
            send_cpu, send_wall = time.thread_time() - cpu, time.perf_counter() - wall
            wall, cpu = time.perf_counter(), time.thread_time()
            delivered = 0
            while True:
                claimed = store.claim_due(T0 + 4_000_000, 4096, 1 << 30)
                if not claimed:
                    break
                store.complete(claimed, None)
                delivered += len(claimed)
            deliver_cpu, deliver_wall = time.thread_time() - cpu, time.perf_counter() - wall
        assert delivered == n and store.pending_count() == 0
        store.close()
    return {"send_cpu_s": send_cpu, "send_wall_s": send_wall,
            "deliver_cpu_s": deliver_cpu, "deliver_wall_s": deliver_wall}


def bench(n: int, runs: int) -> dict:
    times: dict[tuple[str, str], list[dict]] = {}
    variants = [(layout, case) for layout in LAYOUTS for case in CASES]
    for run in range(runs):
        for layout, (name, batch, keyed) in (variants if run % 2 == 0 else variants[::-1]):
            times.setdefault((layout, name), []).append(one_round(layout, batch, keyed, n,
                                                                  seed=run + 1))
    out: dict = {}
    for (layout, name), rows in times.items():
        out.setdefault(layout, {})[name] = {
            f"{what}_msgs_per_{clock}_s": round(n / median([r[f"{what}_{clock}_s"] for r in rows]))
            for what in ("send", "deliver") for clock in ("cpu", "wall")}
    return out


def summary(result: dict) -> list[str]:
    lines = ["| layout | path | send msg/CPU-s | deliver msg/CPU-s | send msg/s | deliver msg/s |",
             "|---|---|---|---|---|---|"]
    for layout, cases in result.items():
        for name, row in cases.items():
            lines.append(f"| {layout} | {name} | {row['send_msgs_per_cpu_s']:,} | "
                         f"{row['deliver_msgs_per_cpu_s']:,} | {row['send_msgs_per_wall_s']:,} | "
                         f"{row['deliver_msgs_per_wall_s']:,} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    result = bench(args.messages, args.runs)
    path = write_result("engine_paths", {"args": {"messages": args.messages, "runs": args.runs},
                                         "paths": result}, args.results_dir)
    print("\n".join(summary(result)))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
