"""The scale model's wheel against the real RocketMQ file wheel (issue #29).

    python -m spark.real_check --model bench/results/wa/model.json \\
        --rows bench/results/rocketmq/rows.jsonl

``spark.wa_model`` fits its wheel coefficients on rtimer's own Python model of RIP-43. This
checks them against the real broker's wheel cells measured by ``bench.rocketmq.compare`` (same
workloads, same bodies): per cell, the model's rolls per message (its roll rule at the default
2-day window; the real cells scale the delays and the window together, so the count is
comparable), its logical bytes per message (CommitLog records + ConsumeQueue + TimerLog + slot
pages) against the real store's CommitLog + ConsumeQueue + TimerLog growth, and its physical
bytes (logical x the fitted physical/logical ratio) against the JVM's ``write_bytes``. Writes
``model-check.md`` and ``model-check.json`` next to the rows.

With ``--spark-summary DIR/summary.csv`` (a ``spark.wa_compare`` run with the engines
``rocketmq-wheel`` / ``rocketmq-rocksdb``) it also writes ``spark-agreement.md``: each real cell
the Spark job measured beside the latest ``bench.rocketmq.compare`` row of the same cell.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from spark.wa_model import predict_per_message, workload_features


def check(coef: dict[str, Any], overhead: float, rows: list[dict]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        if row.get("engine") != "rocketmq-wheel" or row.get("kind") != "wa":
            continue
        n = int(row["sent"])
        f = workload_features(row["workload"], int(row["body_size"]), int(row["seed"]),
                              overhead=overhead, messages=n, wheel=True)
        payload = row["payload_bytes"] / n  # body + topic
        model_payload = payload + overhead  # the model's payload unit (older definition)
        logical = predict_per_message("wheel", coef, model_payload, 0.0, f["rolls"], f["long"],
                                      f["pages"])
        real_logical = (row["commitlog_bytes"] + row["consumequeue_bytes"]
                        + row["timerlog_bytes"]) / n
        physical = logical * coef["physical_per_logical_wheel"]
        real_physical = row["physical_bytes"] / n
        real_rolls = row["rolls"] / n
        out.append({
            "workload": row["workload"], "messages": n, "scale": row.get("scale"),
            "rolls_per_msg_model": round(f["rolls"], 3),
            "rolls_per_msg_real": round(real_rolls, 3),
            "logical_per_msg_model": round(logical, 1),
            "logical_per_msg_real": round(real_logical, 1),
            "logical_error": round((logical - real_logical) / real_logical, 3),
            "physical_per_msg_model": round(physical, 1),
            "physical_per_msg_real": round(real_physical, 1),
            "physical_error": round((physical - real_physical) / real_physical, 3),
            "wa_model": round(physical / payload, 2),
            "wa_real": round(real_physical / payload, 2),
        })
    return out


def agreement(summary: list[dict[str, str]], rows: list[dict]) -> list[dict[str, Any]]:
    """The Spark job's real-engine rows (``spark.wa_compare``'s summary.csv) beside the latest
    ``bench.rocketmq.compare`` row of the same engine, workload and message count: two runs of
    the same cell, so they differ by the run-to-run noise of a real broker."""
    latest: dict[tuple, dict] = {}
    for row in rows:
        if row.get("kind") == "wa" and row.get("engine", "").startswith("rocketmq-"):
            latest[(row["engine"], row["workload"], int(row["messages"]))] = row
    out = []
    for s in summary:
        if not s["engine"].startswith("rocketmq-"):
            continue
        key = (s["engine"], s["workload"], int(float(s["messages"])))
        ref = latest.get(key)
        if ref is None:
            continue
        spark_wa = float(s["wa_physical"])
        out.append({"engine": key[0], "workload": key[1], "messages": key[2],
                    "wa_spark": round(spark_wa, 2), "wa_compare": round(ref["wa_physical"], 2),
                    "difference": round((spark_wa - ref["wa_physical"]) / ref["wa_physical"], 3),
                    "rolls_spark": int(float(s["rolls"])), "rolls_compare": int(ref["rolls"]),
                    "compare_run": ref.get("run_started", "")})
    return out


def markdown(checks: list[dict[str, Any]]) -> str:
    if not checks:
        return "No rocketmq-wheel WA rows.\n"
    cols = list(checks[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(c[k]) for k in cols) + " |" for c in checks]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark.real_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("bench/results/wa/model.json"))
    parser.add_argument("--rows", type=Path, default=Path("bench/results/rocketmq/rows.jsonl"))
    parser.add_argument("--spark-summary", type=Path, default=None,
                        help="a spark.wa_compare summary.csv with rocketmq-* rows: also write "
                             "spark-agreement.md, those rows beside bench.rocketmq.compare's")
    args = parser.parse_args(argv)
    model = json.loads(args.model.read_text())
    rows = [json.loads(line) for line in args.rows.read_text().splitlines() if line.strip()]
    if args.spark_summary is not None:
        import csv
        with args.spark_summary.open(newline="") as f:
            agree = agreement(list(csv.DictReader(f)), rows)
        text = (f"# The Spark WA job's real-engine cells beside bench.rocketmq.compare's\n\n"
                f"Spark: `{args.spark_summary}`; compare: `{args.rows}`.\n\n"
                + (markdown(agree) if agree else "No matching rows.\n"))
        (args.rows.parent / "spark-agreement.md").write_text(text)
        print(text)
    checks = check(model["coefficients"], float(model["overhead_bytes"]), rows)
    out = args.rows.parent
    (out / "model-check.json").write_text(json.dumps(checks, indent=2))
    text = (f"# The scale model's wheel against the real RocketMQ file wheel\n\n"
            f"Model: `{args.model}`; real cells: `{args.rows}`.\n\n" + markdown(checks))
    (out / "model-check.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
