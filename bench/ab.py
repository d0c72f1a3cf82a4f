"""One benchmark of two checkouts, A and B, in one A/B run: rounds alternate (A B, B A, ...),
each run of a checkout under its own virtualenv and working tree, each under the benchmark lock
when one is given (held for that run only, so other benchmarks get their turn between runs).
Every number of the benchmark's result JSON is compared: the median over the rounds of each
side, and B / A.

    python -m bench.ab --a /path/to/checkout-a --b . --rounds 2 --lock /work/bench.lock \\
        --result rocks -- bench.rocks --runs 3

(the benchmark must take ``--results-dir``; ``--result`` is the name it writes, ``rocks`` for
``rocks.json``). Results: bench/results/ab-<result>.json; a markdown table is printed, the
figures whose name says lower-is-better (``_ms``, ``_s``, ``seconds``, ``_us``, ``rss``,
``bytes``, ``cpu``) marked with ↓ (for those B / A above 1 is worse).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import markdown_table, write_result



def lower_is_better(name: str) -> bool:
    """A time, a peak RSS or CPU, by the figure's last name (a rate ``..._per_s`` is not)."""
    last = name.rsplit(".", 1)[-1].split("[", 1)[0]
    if "_per_" in last:
        return False
    return last.endswith(("_ms", "_us", "_s", "seconds", "_mb")) or "rss" in last or \
        "cpu" in last


def flatten(value, prefix: str = "") -> dict[str, float]:
    """Every number in ``value`` (nested dicts and lists) by its dotted path."""
    out: dict[str, float] = {}
    if isinstance(value, bool):
        return out
    if isinstance(value, (int, float)):
        out[prefix] = float(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.update(flatten(item, f"{prefix}[{i}]"))
    return out


def run_once(tree: Path, module_args: list[str], result: str, lock: Path | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="ab-") as scratch:
        command = [str(tree / ".venv" / "bin" / "python"), "-m", *module_args,
                   "--results-dir", scratch]
        if lock is not None:
            command = ["flock", str(lock), *command]
        started = time.time()
        done = subprocess.run(command, cwd=tree, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{tree}: {' '.join(module_args)} failed ({done.returncode}):\n"
                             f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        figures = json.loads((Path(scratch) / f"{result}.json").read_text())
    figures.pop("machine", None)
    return {"figures": flatten(figures), "seconds": round(time.time() - started, 1)}


def compare(runs: dict[str, list[dict]]) -> dict[str, dict]:
    names = sorted(set().union(*(r["figures"] for side in runs.values() for r in side)))
    out = {}
    for name in names:
        a = [r["figures"][name] for r in runs["A"] if name in r["figures"]]
        b = [r["figures"][name] for r in runs["B"] if name in r["figures"]]
        if not a or not b:
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        out[name] = {"a": ma, "b": mb, "b_over_a": round(mb / ma, 4) if ma else None,
                     "a_runs": a, "b_runs": b,
                     "lower_is_better": lower_is_better(name)}
    return out


def table(compared: dict[str, dict]) -> list[str]:
    rows = []
    for name, row in compared.items():
        ratio = "-" if row["b_over_a"] is None else f"{row['b_over_a']:.3f}"
        arrow = " ↓" if row["lower_is_better"] else ""
        rows.append([f"{name}{arrow}", f"{row['a']:,.6g}", f"{row['b']:,.6g}", ratio])
    return markdown_table(["figure", "A (median)", "B (median)", "B / A"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", type=Path, required=True, help="checkout A (the baseline)")
    parser.add_argument("--b", type=Path, required=True, help="checkout B")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lock", type=Path, default=None,
                        help="hold this lock file (flock) for each run")
    parser.add_argument("--result", required=True,
                        help="the result name the benchmark writes (rocks -> rocks.json)")
    parser.add_argument("--results-dir", type=Path, default=None)
    parser.add_argument("module_args", nargs=argparse.REMAINDER,
                        help="-- the benchmark module and its arguments")
    args = parser.parse_args(argv)
    module_args = [a for a in args.module_args if a != "--"]
    if not module_args:
        parser.error("give the benchmark after --, e.g. -- bench.rocks --runs 3")
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    commits = {side: subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree,
                                     capture_output=True, text=True).stdout.strip()
               for side, tree in trees.items()}
    runs: dict[str, list[dict]] = {"A": [], "B": []}
    for round_no in range(args.rounds):
        for side in ("A", "B") if round_no % 2 == 0 else ("B", "A"):
            run = run_once(trees[side], module_args, args.result, args.lock)
            runs[side].append(run)
            print(f"round {round_no + 1} {side} ({commits[side]}): {run['seconds']} s",
                  file=sys.stderr, flush=True)
            # what is measured so far, kept at once: an A/B cut short keeps its runs
            write_result(f"ab-{args.result}-runs", {"commits": commits, "runs": runs},
                         args.results_dir)
    compared = compare(runs)
    path = write_result(f"ab-{args.result}", {
        "a": {"tree": str(trees["A"]), "commit": commits["A"]},
        "b": {"tree": str(trees["B"]), "commit": commits["B"]},
        "benchmark": " ".join(module_args), "rounds": args.rounds, "figures": compared},
        args.results_dir)
    print(f"A = {commits['A']}, B = {commits['B']}; {' '.join(module_args)}; "
          f"{args.rounds} rounds; {path}")
    print("\n".join(table(compared)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
