"""What the key index and the due counters cost, in one run: send/s, delivery/s and write
amplification, with and without business keys, on both RocksDB layouts.

    python -m bench.keys [--messages 50000] [--wa-messages 50000] [--runs 3]

1. send: ``RocksTimerStore.schedule`` (single sends and batches of 100) and ``Broker.send``,
   interleaved runs of three variants: ``bare`` (the store opened with ``key_index=False``:
   no key index, due or topic counters, what a send cost before them), ``no_keys`` (the real code, messages without keys) and
   ``keyed`` (every message with a unique key: one index entry each).
2. deliver: due messages drained into the CommitLog by ``Broker.tick``, without and with keys
   (a keyed store reads each delivered message's keys to drop its index entries).
3. WA: ``bench.harness.run_cell`` rows (the WA benchmark's own cells) for the ``day`` and
   ``cancel`` workloads on both layouts, without and with a key per message.
Results: bench/results/keys.json; a markdown summary is printed.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from bench.common import median, scratch_dir, settled_gc, write_result
from bench.harness import run_cell
from rocks_timer import Broker, BrokerConfig, ManualClock, Message
from rocks_timer.timer.rocksdb import RocksTimerStore
from rocks_timer.timer.store import TimerRecord

T0 = 1_767_225_600_000
LAYOUTS = ("inline", "vlog")
VARIANTS = ("bare", "no_keys", "keyed")


def records(n: int, seed: int, keyed: bool, body: int = 1024) -> list[TimerRecord]:
    rng = random.Random(seed)
    pool = [rng.randbytes(body) for _ in range(256)]
    out = []
    for i in range(n):
        msg_id = f"{seed:08X}{i:024X}"
        keys = (f"order-{seed}-{i}",) if keyed else ()
        out.append(TimerRecord(T0 + 1000 + rng.randrange(3_600_000),
                               Message("orders", pool[i % 256], msg_id=msg_id, keys=keys)))
    return out


def bench_send(n: int, runs: int) -> dict:
    times = {(layout, batch, v): [] for layout in LAYOUTS for batch in (1, 100)
             for v in VARIANTS}
    broker_times = {(layout, v): [] for layout in LAYOUTS for v in ("no_keys", "keyed")}
    for run in range(runs):
        order = VARIANTS if run % 2 == 0 else tuple(reversed(VARIANTS))
        for layout in LAYOUTS:
            for batch in (1, 100):
                for variant in order:
                    recs = records(n, 10 + run, keyed=variant == "keyed")
                    with scratch_dir(prefix="keys-send-") as d:
                        # bare: the engine's baseline option, not a stub of its functions
                        store = RocksTimerStore.open(d / "s", BrokerConfig(rocksdb_layout=layout),
                                                     key_index=variant != "bare")
                        with settled_gc():
                            start = time.perf_counter()
                            for i in range(0, n, batch):
                                store.schedule(recs[i:i + batch], T0)
                            times[(layout, batch, variant)].append(time.perf_counter() - start)
                        store.close()
            for variant in ("no_keys", "keyed") if run % 2 == 0 else ("keyed", "no_keys"):
                msgs = [r.message for r in records(n // 2, 20 + run, keyed=variant == "keyed")]
                with scratch_dir(prefix="keys-broker-") as d:
                    broker = Broker.open(d / "b", BrokerConfig(rocksdb_layout=layout),
                                         clock=ManualClock(T0))
                    with settled_gc():
                        start = time.perf_counter()
                        for m in msgs:
                            broker.send(m, delay_ms=60_000)
                        broker_times[(layout, variant)].append(time.perf_counter() - start)
                    broker.close()
    out: dict = {}
    for layout in LAYOUTS:
        for batch in (1, 100):
            rate = {v: round(n / median(times[(layout, batch, v)])) for v in VARIANTS}
            out[f"{layout}_schedule_batch{batch}"] = {
                **{f"{v}_msgs_per_s": r for v, r in rate.items()},
                "no_keys_vs_bare": round(rate["no_keys"] / rate["bare"], 3),
                "keyed_vs_no_keys": round(rate["keyed"] / rate["no_keys"], 3)}
        rate = {v: round(n // 2 / median(broker_times[(layout, v)])) for v in ("no_keys", "keyed")}
        out[f"{layout}_broker_send"] = {**{f"{v}_msgs_per_s": r for v, r in rate.items()},
                                        "keyed_vs_no_keys": round(rate["keyed"] / rate["no_keys"], 3)}
    return out


def bench_deliver(n: int, runs: int) -> dict:
    times = {(layout, v): [] for layout in LAYOUTS for v in ("no_keys", "keyed")}
    for run in range(runs):
        for layout in LAYOUTS:
            for variant in ("no_keys", "keyed") if run % 2 == 0 else ("keyed", "no_keys"):
                recs = records(n, 30 + run, keyed=variant == "keyed")
                with scratch_dir(prefix="keys-deliver-") as d:
                    clock = ManualClock(T0)
                    broker = Broker.open(d / "b", BrokerConfig(
                        rocksdb_layout=layout, timer_deliver_batch=2000,
                        timer_max_in_flight=4000), clock=clock)
                    for i in range(0, n, 1000):
                        broker.timer.schedule(recs[i:i + 1000], T0)
                    clock.set(T0 + 3_700_000)
                    with settled_gc():
                        start = time.perf_counter()
                        delivered = 0
                        while delivered < n:
                            delivered += broker.tick()
                        times[(layout, variant)].append(time.perf_counter() - start)
                    broker.close()
    out = {}
    for layout in LAYOUTS:
        rate = {v: round(n / median(times[(layout, v)])) for v in ("no_keys", "keyed")}
        out[f"{layout}_deliver"] = {**{f"{v}_msgs_per_s": r for v, r in rate.items()},
                                    "keyed_vs_no_keys": round(rate["keyed"] / rate["no_keys"], 3)}
    return out


WA_FIELDS = ("engine", "workload", "layout", "keys", "messages", "payload_bytes", "wa_physical",
             "wa_logical", "wa_timer", "rocks_wal", "rocks_flush", "rocks_compaction",
             "rocks_vlog", "send_per_s", "complete")


def bench_wa(n: int, workloads: list[str]) -> list[dict]:
    rows = []
    for workload in workloads:
        for profile in ("default", "vlog"):
            for keys in (False, True):
                row = run_cell("rocksdb", workload, n, profile=profile, keys=keys)
                rows.append({k: row[k] for k in WA_FIELDS})
    return rows


def summary(result: dict) -> str:
    lines = ["| path | bare msg/s | no keys msg/s | keyed msg/s | no keys / bare | keyed / no keys |",
             "|---|---|---|---|---|---|"]
    for name, r in result["send"].items():
        lines.append(f"| {name} | {r.get('bare_msgs_per_s', '-')} | {r['no_keys_msgs_per_s']} | "
                     f"{r['keyed_msgs_per_s']} | {r.get('no_keys_vs_bare', '-')} | "
                     f"{r['keyed_vs_no_keys']} |")
    for name, r in result["deliver"].items():
        lines.append(f"| {name} | - | {r['no_keys_msgs_per_s']} | {r['keyed_msgs_per_s']} | - | "
                     f"{r['keyed_vs_no_keys']} |")
    lines += ["", "| workload | layout | keys | WA physical | WA logical | WA timer | wal | flush "
                  "| compaction | vlog |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["wa"]:
        p = max(1, r["payload_bytes"])
        lines.append(f"| {r['workload']} | {r['layout']} | {'yes' if r['keys'] else 'no'} | "
                     f"{r['wa_physical']:.3f} | {r['wa_logical']:.3f} | {r['wa_timer']:.3f} | "
                     f"{r['rocks_wal'] / p:.3f} | {r['rocks_flush'] / p:.3f} | "
                     f"{r['rocks_compaction'] / p:.3f} | {r['rocks_vlog'] / p:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.keys", description=__doc__)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--wa-messages", type=int, default=50_000)
    parser.add_argument("--workloads", default="day,cancel")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = {"messages": args.messages, "runs": args.runs,
              "send": bench_send(args.messages, args.runs),
              "deliver": bench_deliver(args.messages, args.runs),
              "wa": bench_wa(args.wa_messages, args.workloads.split(","))}
    result["seconds"] = round(time.perf_counter() - started, 1)
    write_result("keys", result, args.results_dir)
    print(summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
