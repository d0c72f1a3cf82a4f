"""Write amplification of the timer engines, one Spark task per measured cell
(definitions: docs/WRITE_AMPLIFICATION.md).

    python -m spark.wa_compare --workloads short,month --engines rocksdb,wheel \\
        --messages 20000 --out bench/results/wa

The default profile is ``vlog``: the RocksDB engine's default layout (what ``rtimer`` creates);
``default`` is the ``inline`` layout's default profile. Rows and the chart name the layout.
``rocketmq-wheel`` and ``rocketmq-rocksdb`` are the real Apache RocketMQ's two timer engines
(``bench.rocketmq.compare.spark_cell``: the real broker from ``make rocketmq``, the workload's
delays and the wheel's roll window scaled, one JVM cell at a time).

Each (engine, workload, profile, shard) cell is one Spark task that runs ``bench.harness.run_cell``
in its worker process (its own broker directory, its own ``/proc/self/io``); the driver collects
the rows into a DataFrame, aggregates the shards of each (engine, workload, profile) with Spark
and writes ``cells.parquet`` (every row), ``summary.csv``, ``summary.md`` and ``wa.png``.
``run(spark, args)`` is the core, callable with an existing session (tests, the tuning script).
"""
from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from bench.harness import COLUMNS, COMPONENTS, DEFAULT_WORKDIR
from bench.workloads import DEFAULT_BODY_SIZE, WORKLOAD_NAMES, fits_levels

ENGINES = ("rocksdb", "wheel", "levels", "rocketmq-wheel", "rocketmq-rocksdb")
REAL_ENGINES = ("rocketmq-wheel", "rocketmq-rocksdb")
COST = {"wheel": 6.0, "levels": 3.0, "rocksdb": 1.0, "memory": 0.5,  # rough per-message cost
        "rocketmq-wheel": 8.0, "rocketmq-rocksdb": 8.0}
WORKLOAD_COST = {"month": 3.0, "day": 2.0}
STRINGS = {"engine", "workload", "profile", "workdir", "layout"}
FLOATS = {"wa_physical", "wa_logical", "wa_timer", "seconds", "send_seconds", "deliver_seconds",
          "send_per_s", "deliver_per_s", "space_amp"}
SUMMED = ("messages", "sent", "cancelled", "delivered", "payload_bytes", "physical_bytes",
          "cancelled_write_bytes", "logical_bytes", "timer_bytes", *COMPONENTS, "rocks_user",
          "wheel_rolls", "rolls", "peak_disk_bytes", "final_disk_bytes", "peak_timer_disk_bytes",
          "final_timer_disk_bytes", "peak_live_payload", "send_seconds",
          "deliver_seconds", "ticks")
SUMMARY_COLUMNS = ("engine", "workload", "profile", "layout", "messages", "body_size", "shards", "complete",
                   "payload_bytes", "physical_bytes", "logical_bytes", "timer_bytes",
                   "wa_physical", "wa_logical", "wa_timer", "peak_disk_bytes", "seconds",
                   "send_per_s", "deliver_per_s", "rolls", *COMPONENTS, "rocks_user",
                   "wheel_rolls", "cancelled_write_bytes")


def csv_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_common_arguments(parser: argparse.ArgumentParser, *, workloads: str, messages: int,
                         profiles: str) -> None:
    parser.add_argument("--workloads", type=csv_list, default=csv_list(workloads),
                        help=f"comma list of {', '.join(WORKLOAD_NAMES)} (default {workloads})")
    parser.add_argument("--messages", type=int, default=messages,
                        help=f"messages per workload (default {messages})")
    parser.add_argument("--body-size", type=int, default=DEFAULT_BODY_SIZE,
                        help="body bytes: 128, 1024 (default) or 4096")
    parser.add_argument("--profiles", type=csv_list, default=csv_list(profiles),
                        help=f"RocksDB profiles (default {profiles})")
    parser.add_argument("--partitions", type=int, default=1,
                        help="shards per cell, each its own Spark task (default 1)")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--seed", type=int, default=7, help="workload seed (default 7)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                        help="where cells put their brokers (a real disk, not tmpfs)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m spark.wa_compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, workloads="short,day,month,burst,cancel,levels",
                         messages=200_000, profiles="vlog")
    parser.add_argument("--engines", type=csv_list, default=["rocksdb", "wheel", "levels"],
                        help="comma list of rocksdb, wheel, levels (levels only where the "
                             "workload's delays are level delays), rocketmq-wheel, "
                             "rocketmq-rocksdb (the real broker's engines: `make rocketmq`; "
                             "short, day and month only)")
    return parser


def check_args(args: argparse.Namespace) -> None:
    bad = [w for w in args.workloads if w not in WORKLOAD_NAMES]
    if bad:
        raise ValueError(f"unknown workload(s) {', '.join(bad)}; valid: {', '.join(WORKLOAD_NAMES)}")
    bad = [e for e in getattr(args, "engines", ["rocksdb"]) if e not in ENGINES + ("memory",)]
    if bad:
        raise ValueError(f"unknown engine(s) {', '.join(bad)}; valid: {', '.join(ENGINES)}")
    from rocks_timer.timer.rocksdb.profiles import PROFILES
    def known(label: str) -> bool:  # a profile, "vlog", or "vlog:<profile>"
        layout, _, name = label.partition(":")
        return label in PROFILES or (layout == "vlog" and (not name or name in PROFILES))

    bad = [p for p in args.profiles if not known(p)]
    if bad:
        raise ValueError(f"unknown profile(s) {', '.join(bad)}; valid: {', '.join(PROFILES)}, "
                         f"vlog, vlog:<profile>")
    if args.messages < 1 or args.partitions < 1 or args.body_size < 0:
        raise ValueError("--messages and --partitions must be >= 1, --body-size >= 0")


def plan_cells(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (engine, workload, profile, shard) cell, the most expensive first (Spark hands the
    tasks out in order, so the long ones start early and the two cores finish together)."""
    cells = []
    for workload in args.workloads:
        for engine in args.engines:
            if engine == "levels" and not fits_levels(workload):
                continue
            if engine in REAL_ENGINES and workload not in ("short", "day", "month"):
                continue
            for profile in (args.profiles if engine == "rocksdb" else ["-"]):
                for shard in range(args.partitions):
                    cells.append({"engine": engine, "workload": workload,
                                  "messages": args.messages, "body_size": args.body_size,
                                  "profile": profile, "shard": shard,
                                  "shards": args.partitions, "seed": args.seed,
                                  "workdir": str(Path(args.workdir).resolve())})
    cells.sort(key=lambda c: -COST.get(c["engine"], 1.0) * WORKLOAD_COST.get(c["workload"], 1.0))
    return cells


def _plain(row: dict[str, Any]) -> tuple:
    out = []
    for name in COLUMNS:
        value = row.get(name)
        if name in STRINGS:
            out.append(str(value))
        elif name == "complete":
            out.append(bool(value))
        elif name in FLOATS:
            out.append(float(value or 0.0))
        else:
            out.append(int(value or 0))
    return tuple(out)


def cell_task(cells, run: Callable[..., dict] | None = None):
    """The body of one Spark partition: run its cells and yield plain tuples (``COLUMNS``)."""
    from bench.harness import run_cell
    for cell in cells:
        if run is None and cell["engine"] in REAL_ENGINES:
            from bench.rocketmq.compare import spark_cell
            yield _plain(spark_cell(**cell))
        else:
            yield _plain((run or run_cell)(**cell))


def schema():
    from pyspark.sql.types import (BooleanType, DoubleType, LongType, StringType, StructField,
                                   StructType)
    def kind(name: str):
        if name in STRINGS:
            return StringType()
        if name == "complete":
            return BooleanType()
        return DoubleType() if name in FLOATS else LongType()
    return StructType([StructField(n, kind(n), False) for n in COLUMNS])


def run_tasks(spark, cells: list[dict[str, Any]], task: Callable, label: str) -> list[tuple]:
    """Run ``task`` over ``cells`` (one partition each) with a rich progress bar of done tasks."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
    sc = spark.sparkContext
    group = f"rocks-timer-{label}-{time.monotonic_ns()}"
    sc.setJobGroup(group, label)
    result: dict[str, Any] = {}

    def collect() -> None:
        try:
            result["rows"] = sc.parallelize(cells, len(cells)).mapPartitions(task).collect()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            result["error"] = exc

    worker = threading.Thread(target=collect, name="spark-collect", daemon=True)
    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), transient=False) as progress:
        bar = progress.add_task(label, total=len(cells))
        worker.start()
        tracker = sc.statusTracker()
        while worker.is_alive():
            done = 0
            for job_id in tracker.getJobIdsForGroup(group):
                job = tracker.getJobInfo(job_id)
                for stage_id in (job.stageIds if job else ()):
                    stage = tracker.getStageInfo(stage_id)
                    done += stage.numCompletedTasks if stage else 0
            progress.update(bar, completed=min(done, len(cells)))
            worker.join(0.5)
        progress.update(bar, completed=len(cells) if "rows" in result else None)
    sc.setLocalProperty("spark.jobGroup.id", None)
    if "error" in result:
        raise result["error"]
    return result["rows"]


def summarize(cells_df):
    """Aggregate the shards of each (engine, workload, profile) with Spark; WA from the sums."""
    from pyspark.sql import functions as F
    aggs = [F.sum(c).alias(c) for c in SUMMED]
    aggs += [F.first("body_size").alias("body_size"), F.count("*").alias("shards"),
             F.min(F.col("complete").cast("int")).cast("boolean").alias("complete"),
             F.max("seconds").alias("seconds"), F.first("layout").alias("layout")]
    out = cells_df.groupBy("engine", "workload", "profile").agg(*aggs)
    payload = F.greatest(F.col("payload_bytes"), F.lit(1))
    out = (out.withColumn("wa_physical", F.col("physical_bytes") / payload)
              .withColumn("wa_logical", F.col("logical_bytes") / payload)
              .withColumn("wa_timer", F.col("timer_bytes") / payload)
              .withColumn("send_per_s", F.col("sent") / F.col("send_seconds"))
              .withColumn("deliver_per_s", F.col("delivered") / F.col("deliver_seconds")))
    return out.orderBy("workload", "engine", "profile")


def write_outputs(spark, rows: list[tuple], out: Path, title: str) -> dict[str, Path]:
    """cells.parquet (every row), summary.csv (one file), summary.md and wa.png."""
    from spark.report import markdown_table, wa_chart
    out.mkdir(parents=True, exist_ok=True)
    cells_df = spark.createDataFrame(rows, schema())
    cells_df.coalesce(1).write.mode("overwrite").parquet(str(out / "cells.parquet"))
    summary = summarize(cells_df).toPandas()[list(SUMMARY_COLUMNS)]
    paths = {"cells": out / "cells.parquet", "summary_csv": out / "summary.csv",
             "summary_md": out / "summary.md", "chart": out / "wa.png"}
    summary.to_csv(paths["summary_csv"], index=False)
    shown = ["engine", "workload", "profile", "layout", "messages", "payload_bytes", "physical_bytes",
             "wa_physical", "wa_logical", "wa_timer", "peak_disk_bytes", "seconds",
             "send_per_s", "deliver_per_s", "complete"]
    comp = ["engine", "workload", "profile"] + [c for c in COMPONENTS if summary[c].any()]
    per_payload = summary[comp].copy()
    for c in comp[3:]:
        per_payload[c] = summary[c] / summary["payload_bytes"]
    text = (f"# {title}\n\n## Write amplification per cell\n\n" + markdown_table(summary, shown)
            + "\n## Logical bytes per payload byte, by component\n\n"
            + markdown_table(per_payload, comp))
    paths["summary_md"].write_text(text, encoding="utf-8")
    wa_chart(summary, paths["chart"], title)
    return paths


def run(spark, args: argparse.Namespace | Sequence[str]) -> dict[str, Path]:
    """Plan, run and summarise the cells on an existing session; returns the output paths."""
    if not isinstance(args, argparse.Namespace):
        args = build_parser().parse_args(list(args))
    check_args(args)
    cells = plan_cells(args)
    rows = run_tasks(spark, cells, cell_task, "wa cells")
    title = (f"Write amplification: {args.messages:,} messages per workload, "
             f"{args.body_size} B bodies, seed {args.seed}")
    return write_outputs(spark, rows, Path(args.out), title)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    from spark.session import run_job
    return run_job(args.master, "rocks-timer-wa-compare", lambda spark: run(spark, args),
                   show="summary_md")


if __name__ == "__main__":
    raise SystemExit(main())
