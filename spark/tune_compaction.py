"""Compaction tuning: every RocksDB profile (and the ``vlog`` layout) x workload as one Spark
task, ranked.

    python -m spark.tune_compaction --messages 20000 --out bench/results/tune
    rtimer bench tune --messages 20000 --out DIR

Each cell runs ``bench.harness.run_cell`` (engine ``rocksdb``) in a Spark worker and adds:

- ``space_amp``: peak disk of the RocksDB directory / peak live payload (pending messages);
  ``final_timer_disk_bytes`` is what stays on disk once everything is delivered and settled;
- empty-scan latency after heavy deletes, everything delivered: ``claim_us`` times
  ``broker.timer.claim_due(now, ...)`` with nothing due (the deliverer's tick, from its cursor),
  ``first_us`` times ``broker.timer.scan(limit=1)`` (a listing from the first key, the one that
  walks tombstones); both before the final flush/compaction (``*_unsettled``) and after;
- ``compaction_cpu_s``: the ``rocksdb.compaction.times.cpu_micros`` histogram sum (-1 if the
  statistics do not report it).

Ranking (``ranking.csv``, best first): per workload, each metric is divided by the best value
of that workload (lower is better; rates inverted) and the score is the weighted mean with
weights wa_timer 2, space_amp 1, send_per_s 1, deliver_per_s 1, first_us_unsettled 0.5 (1.0 =
best at everything). The recommended profile has the lowest mean score over the workloads.
This module imports pyspark only inside ``main``/``run`` (importable without it).
"""
from __future__ import annotations

import argparse
import re
import statistics
import time
from pathlib import Path
from typing import Any, Sequence

SCAN_REPEATS = 30
WEIGHTS = {"wa_timer": 2.0, "space_amp": 1.0, "send_per_s": 1.0, "deliver_per_s": 1.0,
           "first_us_unsettled": 0.5}
HIGHER_IS_BETTER = {"send_per_s", "deliver_per_s"}
_CPU = re.compile(r"^rocksdb\.compaction\.times\.cpu_micros .*?COUNT : (\d+) SUM : (\d+)", re.M)
EXTRA = ("claim_us_unsettled", "first_us_unsettled", "claim_us", "first_us", "compaction_cpu_s",
         "compactions")  # space_amp is a harness column (peak timer disk / peak live payload)


def _median_us(fn) -> float:
    times = []
    for _ in range(SCAN_REPEATS):
        started = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - started) / 1000)
    return statistics.median(times)


def _scan_latency(broker, row: dict[str, Any], suffix: str) -> None:
    timer, now = broker.timer, broker.clock.now_ms()
    cfg = broker.config
    row["claim_us" + suffix] = _median_us(
        lambda: timer.claim_due(now, cfg.timer_deliver_batch, cfg.timer_deliver_max_bytes))
    row["first_us" + suffix] = _median_us(lambda: timer.scan(limit=1))


def compaction_cpu(broker) -> tuple[float, int]:
    """(seconds, compactions) from the store's statistics histogram, or (-1, -1)."""
    match = _CPU.search(broker.timer.statistics() or "")
    if not match:
        return -1.0, -1
    return int(match.group(2)) / 1e6, int(match.group(1))


def tune_task(cells):
    """One Spark partition: run its cells with the extra measurements; yield plain tuples."""
    from bench.harness import COLUMNS, run_cell

    def unsettled(broker, row):
        _scan_latency(broker, row, "_unsettled")

    def settled(broker, row):
        _scan_latency(broker, row, "")
        row["compaction_cpu_s"], row["compactions"] = compaction_cpu(broker)

    for cell in cells:
        row = run_cell(**cell, on_delivered=unsettled, after=settled)
        row["space_amp"] = row["peak_timer_disk_bytes"] / max(1, row["peak_live_payload"])
        yield tuple(row[c] for c in COLUMNS) + tuple(float(row.get(c, -1.0)) for c in EXTRA)


def rank(frame):
    """Add ``score`` and ``rank`` (per workload) and sort best first (pandas frame)."""
    frame = frame.copy()
    frame["score"] = 0.0
    for metric, weight in WEIGHTS.items():
        grouped = frame.groupby("workload")[metric]
        if metric in HIGHER_IS_BETTER:
            part = grouped.transform("max") / frame[metric].clip(lower=1e-9)
        else:
            part = frame[metric] / grouped.transform("min").clip(lower=1e-9)
        frame["score"] += weight * part
    frame["score"] /= sum(WEIGHTS.values())
    frame["rank"] = frame.groupby("workload")["score"].rank(method="min").astype(int)
    overall = frame.groupby("profile")["score"].mean().rename("mean_score")
    frame = frame.join(overall, on="profile")
    return frame.sort_values(["mean_score", "workload", "score"]).reset_index(drop=True), overall


def build_parser() -> argparse.ArgumentParser:
    from spark.wa_compare import add_common_arguments
    from rocks_timer.timer.rocksdb.profiles import PROFILES
    parser = argparse.ArgumentParser(prog="python -m spark.tune_compaction", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, workloads="short,day,burst,cancel", messages=20_000,
                         profiles=",".join([*PROFILES, "vlog"]))
    return parser


def run(spark, args: argparse.Namespace | Sequence[str]) -> dict[str, Path]:
    import pandas as pd
    from bench.harness import COLUMNS
    from spark import wa_compare
    from spark.report import markdown_table, pareto_chart
    if not isinstance(args, argparse.Namespace):
        args = build_parser().parse_args(list(args))
    args.engines = ["rocksdb"]
    wa_compare.check_args(args)
    cells = wa_compare.plan_cells(args)
    rows = wa_compare.run_tasks(spark, cells, tune_task, "tuning cells")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows, columns=list(COLUMNS) + list(EXTRA))
    sums = ["payload_bytes", "physical_bytes", "timer_bytes", "sent", "delivered",
            "send_seconds", "deliver_seconds", "peak_timer_disk_bytes", "peak_live_payload",
            "final_timer_disk_bytes", "rocks_wal", "rocks_flush", "rocks_compaction",
            "rocks_vlog", "rocks_relocation"]
    firsts = ["claim_us_unsettled", "first_us_unsettled", "claim_us", "first_us",
              "compaction_cpu_s", "compactions"]
    agg = frame.groupby(["profile", "workload"], as_index=False).agg(
        {**{c: "sum" for c in sums}, **{c: "max" for c in firsts}, "messages": "sum"})
    agg["wa_physical"] = agg["physical_bytes"] / agg["payload_bytes"]
    agg["wa_timer"] = agg["timer_bytes"] / agg["payload_bytes"]
    agg["space_amp"] = agg["peak_timer_disk_bytes"] / agg["peak_live_payload"].clip(lower=1)
    agg["send_per_s"] = agg["sent"] / agg["send_seconds"]
    agg["deliver_per_s"] = agg["delivered"] / agg["deliver_seconds"]
    ranked, overall = rank(agg)
    columns = ["profile", "workload", "rank", "score", "mean_score", "wa_physical", "wa_timer",
               "space_amp", "send_per_s", "deliver_per_s", "claim_us_unsettled",
               "first_us_unsettled", "claim_us", "first_us", "compaction_cpu_s", "compactions",
               "final_timer_disk_bytes", "rocks_wal", "rocks_flush", "rocks_compaction",
               "payload_bytes", "messages"]
    paths = {"ranking": out / "ranking.csv", "md": out / "recommendation.md",
             "chart": out / "pareto.png"}
    ranked[columns].to_csv(paths["ranking"], index=False)
    best = overall.idxmin()
    front = _pareto(ranked)
    pareto_chart(ranked, "wa_timer", "space_amp", ["profile"], paths["chart"],
                 "RocksDB profiles: timer WA vs space amplification (lower-left is better)",
                 front)
    text = (f"# Compaction tuning: {args.messages:,} messages per workload\n\n"
            f"Recommended profile: **{best}** (lowest mean score over "
            f"{', '.join(args.workloads)}; 1.0 = best at every metric).\n\n"
            "Mean score per profile:\n\n"
            + markdown_table(overall.reset_index().sort_values("mean_score"))
            + "\n## Ranking (best first)\n\n" + markdown_table(ranked, columns[:17]))
    paths["md"].write_text(text, encoding="utf-8")
    return paths


def _pareto(frame):
    """True for rows no other row of the same workload beats on both wa_timer and space_amp."""
    flags = []
    for _, row in frame.iterrows():
        same = frame[frame["workload"] == row["workload"]]
        beaten = ((same["wa_timer"] <= row["wa_timer"]) & (same["space_amp"] <= row["space_amp"])
                  & ((same["wa_timer"] < row["wa_timer"]) | (same["space_amp"] < row["space_amp"])))
        flags.append(not beaten.any())
    import pandas as pd
    return pd.Series(flags, index=frame.index)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from spark import wa_compare
    args.engines = ["rocksdb"]
    try:
        wa_compare.check_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    from spark.session import run_job
    return run_job(args.master, "rocks-timer-tune-compaction", lambda spark: run(spark, args),
                   show="md")


if __name__ == "__main__":
    raise SystemExit(main())
