"""Gigabyte-scale write amplification of one store per cell (issue `vlog`;
definitions in docs/WRITE_AMPLIFICATION.md).

Each (workload, profile) cell runs ``bench.harness.run_cell`` with one shard, in its own child
process, so its peak RSS (``ru_maxrss``) is the cell's alone. Rows go to
``<out>/rows.jsonl`` (appended, one per cell) and ``<out>/summary.md``.

    python -m bench.scale --messages 2000000 --workloads short,day,month \\
        --profiles default,blob,vlog --out bench/results/scale --workdir /work/scale-tmp

Profiles: an ``inline`` RocksDB profile name (``default``, ``blob``, ...), ``vlog`` (the vlog
layout with the default profile) or ``vlog:<profile>``; ``wheel`` runs the file wheel instead.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

SHOWN = ("workload", "profile", "messages", "payload_bytes", "wa_physical", "wa_logical",
         "wa_timer", "space_amp", "send_per_s", "deliver_per_s", "peak_rss_bytes",
         "rss_before_open_bytes", "complete", "seconds")


def run_one(workload: str, profile: str, messages: int, workdir: str) -> dict:
    from bench.harness import run_cell
    engine = "wheel" if profile == "wheel" else "rocksdb"
    return run_cell(engine, workload, messages, profile="default" if engine == "wheel" else profile,
                    workdir=workdir)


PARTS = ("cl_delivery", "consumequeue", "rocks_wal", "rocks_flush", "rocks_compaction",
         "rocks_vlog", "rocks_relocation")


def components(rows: list[dict]) -> str:
    """Logical bytes per payload byte, by component."""
    head = ["workload", "profile", *PARTS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        payload = max(1, row["payload_bytes"])
        lines.append("| " + " | ".join([row["workload"], row["profile"]] + [
            f"{row.get(name, 0) / payload:.3f}" for name in PARTS]) + " |")
    return "\n".join(lines) + "\n"


def summary(rows: list[dict]) -> str:
    return table(rows) + "\n" + components(rows)


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(SHOWN) + " |", "|" + "---|" * len(SHOWN)]
    for row in rows:
        cells = []
        for name in SHOWN:
            value = row.get(name)
            if name.endswith("_bytes") and isinstance(value, int):
                cells.append(f"{value / 1e6:,.1f} MB")
            elif isinstance(value, float):
                cells.append(f"{value:,.2f}")
            else:
                cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--workloads", default="short,day,month")
    parser.add_argument("--profiles", default="default,blob,vlog")
    parser.add_argument("--out", default="bench/results/scale")
    parser.add_argument("--workdir", default=str(Path(__file__).resolve().parent / "results" / "tmp"))
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--report", action="store_true",
                        help="only rewrite summary.md from the rows already in --out")
    args = parser.parse_args(argv)
    if args.one:  # the child: one cell, its row as JSON on stdout
        row = run_one(args.workloads, args.profiles, args.messages, args.workdir)
        print(json.dumps(row, default=str))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report:
        rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
        (out / "summary.md").write_text(summary(rows), encoding="utf-8")
        print(summary(rows))
        return 0
    rows = []
    for workload in args.workloads.split(","):
        for profile in args.profiles.split(","):
            started = time.monotonic()
            child = subprocess.run(
                [sys.executable, "-m", "bench.scale", "--one", "--messages", str(args.messages),
                 "--workloads", workload, "--profiles", profile, "--workdir", args.workdir],
                capture_output=True, text=True, check=False)
            if child.returncode != 0:
                print(f"{workload}/{profile}: failed\n{child.stderr[-3000:]}", file=sys.stderr)
                return 1
            row = json.loads(child.stdout.strip().splitlines()[-1])
            rows.append(row)
            with open(out / "rows.jsonl", "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row, default=str) + "\n")
            print(f"{workload}/{profile}: wa_physical {row['wa_physical']:.2f} wa_logical "
                  f"{row['wa_logical']:.2f} space {row['space_amp']:.2f} send/s "
                  f"{row['send_per_s']:,.0f} deliver/s {row['deliver_per_s']:,.0f} peak RSS "
                  f"{row['peak_rss_bytes'] / 1e6:,.0f} MB ({time.monotonic() - started:.0f} s)",
                  flush=True)
    (out / "summary.md").write_text(summary(rows), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
