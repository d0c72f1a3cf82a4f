"""Peer benchmark: rocks-timer against the delay queues a Python user would pick instead, in one run.

    python -m bench.peers [--single 20000] [--batch 100000] [--cancel 20000] [--drain 100000]

The peers are Debian's packages, started by this program on 127.0.0.1 (a free port, data in a
scratch directory on a real disk, stopped at the end):

- beanstalkd with its binlog on (``-b <dir> -f 1000``: fsync at most every second), through
  greenstalk;
- Redis with a sorted set of due times plus one string per payload, AOF on with
  ``appendfsync everysec`` (RDB snapshots off), through redis-py.

Every system gets the same 1 KiB bodies, the same counts, and these phases (inputs prepared
before the clock starts, the garbage collector settled, as in the other benchmarks):

1. per-call send: one message per call, due in an hour (rocks-timer with its deliverer running);
2. batch send: 100 messages per call;
   both again in **busy** mode, on fresh systems: each call's messages due 0-2 s after it
   (uniform, the same draws for every system; beanstalkd's to the nearest whole second), so
   rocks-timer's deliverer (and each peer's own timer) works while the sends go on;
3. cancel: the first ``--cancel`` messages of phase 1, one call each; every one must be cancelled;
4. drain: ``--drain`` messages all due at the same moment, then the time from that moment (for
   beanstalkd, whose delays are whole seconds, from the moment it holds them all ready) until one
   consumer has taken them all: rocks-timer until all are readable on their topic.

Each round (``--runs``, default 3) opens every system afresh and runs each phase on all of them
back to back, in an order that rotates between rounds; rates are medians over rounds, a ratio
rocks-timer / peer is the median of the rounds' ratios (with their range).
A peer whose binary or client is missing is named and skipped; the others are measured.
Results: bench/results/peers.json; a markdown table with the ratios rocks-timer / peer is printed.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from bench.common import median, scratch_dir, settled_gc, write_result
from bench.peers_clients import (BATCH, BODY_BYTES, BUSY_MAX_DELAY_MS, DELAY_MS, SYSTEMS,
                                 VERSION_COMMANDS, bodies, missing_reason, now_ms, version)

FIGURES = {"single": "per-call send", "batch": f"batch send ({BATCH} per call)",
           "cancel": "cancel", "drain": "drain (all due at once)"}
BUSY_FIGURES = {"single": "per-call send, due in 0-2 s", "batch": f"batch send ({BATCH} per call), "
                "due in 0-2 s"}
TARGETS = (("single", "beanstalkd", 2.0), ("batch", "Redis", 2.0))


def timed(step, *args) -> tuple[float, object]:
    with settled_gc():
        start = time.perf_counter()
        out = step(*args)
        return time.perf_counter() - start, out


def drain_phase(system, args, batch_s: float) -> dict:
    items = system.prepare(args.drain, "d")
    margin_ms = int(1000 * (args.drain_margin if args.drain_margin is not None
                            else 1 + 3 * args.drain * batch_s / args.batch))
    due_ms = now_ms() + margin_ms
    system.load_due(items, due_ms)
    loaded_ms = now_ms()
    if loaded_ms >= due_ms:
        raise RuntimeError(f"{system.name}: loading the drain set ended after its due time; "
                           f"raise --drain-margin")
    time.sleep((due_ms - now_ms()) / 1000 + 0.005)
    system.wait_due(args.drain)
    drain_s, _ = timed(system.drain, args.drain)
    return {"drain_per_s": args.drain / drain_s, "drain_s": drain_s,
            "drain_wait_ms": due_ms - loaded_ms}


def run_round(order: list[str], pool: list[bytes], args) -> dict[str, dict]:
    """One round: every system open at once (fresh servers and directories), and each phase run
    on every system back to back, so the figures compared meet the same machine state."""
    with ExitStack() as stack:
        systems = {}
        for name in order:
            data = stack.enter_context(scratch_dir(prefix=f"peers-{name.lower()}-"))
            systems[name] = stack.enter_context(SYSTEMS[name][0](data, pool))
        out: dict[str, dict] = {name: {} for name in order}
        handles, batch_s = {}, {}
        single_delays, batch_delays = [DELAY_MS] * args.single, [DELAY_MS] * (args.batch // BATCH)
        for name, system in systems.items():
            single_s, handles[name] = timed(system.send_single, system.prepare(args.single, "s"),
                                            single_delays)
            out[name]["single_per_s"] = args.single / single_s
        for name, system in systems.items():
            batch_s[name], _ = timed(system.send_batches, system.prepare(args.batch, "b"),
                                     batch_delays)
            out[name]["batch_per_s"] = args.batch / batch_s[name]
        for name, system in systems.items():
            victims = handles[name][:args.cancel]
            cancel_s, cancelled = timed(system.cancel, victims)
            if cancelled != len(victims):
                raise RuntimeError(f"{name}: {cancelled} of {len(victims)} cancelled")
            out[name]["cancel_per_s"] = len(victims) / cancel_s
        for name, system in systems.items():
            out[name].update(drain_phase(system, args, batch_s[name]))
    return out


def run_busy_round(order: list[str], pool: list[bytes], args, seed: int) -> dict[str, dict]:
    """Busy mode: per-call and batch sends due 0-2 s after each call, on fresh systems."""
    rng = random.Random(seed)
    single_delays = [rng.randrange(BUSY_MAX_DELAY_MS + 1) for _ in range(args.single)]
    batch_delays = [rng.randrange(BUSY_MAX_DELAY_MS + 1) for _ in range(args.batch // BATCH)]
    with ExitStack() as stack:
        systems = {}
        for name in order:
            data = stack.enter_context(scratch_dir(prefix=f"peers-busy-{name.lower()}-"))
            systems[name] = stack.enter_context(SYSTEMS[name][0](data, pool))
        out: dict[str, dict] = {name: {} for name in order}
        for name, system in systems.items():
            single_s, _ = timed(system.send_single, system.prepare(args.single, "s"),
                                single_delays)
            out[name]["single_per_s"] = args.single / single_s
        for name, system in systems.items():
            batch_s, _ = timed(system.send_batches, system.prepare(args.batch, "b"),
                               batch_delays)
            out[name]["batch_per_s"] = args.batch / batch_s
    return out


def summarise(runs: list[dict]) -> dict:
    keys = runs[0].keys()
    out = {k: round(median([r[k] for r in runs]), 3 if k == "drain_s" else 0) for k in keys}
    out["rounds"] = [{k: round(r[k], 3) for k in keys} for r in runs]
    return out


def round_ratios(rounds: list[dict[str, dict]], peer: str, figures=FIGURES) -> dict:
    """rocks-timer / peer per figure: the median over rounds of each round's ratio, and the
    range over rounds."""
    out = {}
    for key in figures:
        each = [r["rocks-timer"][key + "_per_s"] / r[peer][key + "_per_s"] for r in rounds]
        out[key] = round(median(each), 3)
        out[key + "_range"] = [round(min(each), 3), round(max(each), 3)]
    return out


def table(systems: dict, ratios: dict, args, figures=FIGURES) -> list[str]:
    """Rates are medians over rounds; ratios the median of each round's ratio [its range]."""
    peers = list(ratios)
    head = ["figure"] + list(systems) + [f"rocks-timer / {p}" for p in peers]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for key, label in figures.items():
        if key == "drain":
            label = f"drain {args.drain:,} due at once"
        cells = [label]
        for s in systems.values():
            cell = f"{s[key + '_per_s']:,.0f}/s"
            cells.append(cell + (f" ({s['drain_s']:.2f} s)" if key == "drain" else ""))
        for p in peers:
            low, high = ratios[p][key + "_range"]
            spread = f" [{low:.2f}-{high:.2f}]" if args.runs > 1 else ""
            cells.append(f"{ratios[p][key]:.2f}x{spread}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--single", type=int, default=20_000, help="messages sent one per call")
    parser.add_argument("--batch", type=int, default=100_000, help=f"messages sent {BATCH} per call")
    parser.add_argument("--cancel", type=int, default=20_000,
                        help="messages cancelled (at most --single)")
    parser.add_argument("--drain", type=int, default=100_000, help="messages due at once")
    parser.add_argument("--drain-margin", type=float, default=None,
                        help="seconds between the start of the drain load and its due time "
                             "(default: 1 + 3x the measured batch-send time of that many)")
    parser.add_argument("--runs", type=int, default=3,
                        help="rounds (systems in a rotating order); figures are medians")
    parser.add_argument("--results-dir", type=Path, default=None,
                        help="where the JSON goes (default bench/results)")
    args = parser.parse_args(argv)
    for name in ("single", "batch", "cancel", "drain", "runs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.batch % BATCH:
        parser.error(f"--batch must be a multiple of {BATCH}")
    args.cancel = min(args.cancel, args.single)

    missing = {}
    for name, (_cls, needs) in SYSTEMS.items():
        reason = needs and missing_reason(*needs)
        if reason:
            missing[name] = reason
            print(f"{name}: NOT MEASURED: {reason}; measuring the others.")
    present = [name for name in SYSTEMS if name not in missing]
    pool = bodies()
    load_before = os.getloadavg()
    rounds: list[dict[str, dict]] = []
    for run in range(args.runs):
        rounds.append(run_round(present[run % len(present):] + present[:run % len(present)],
                                pool, args))
    busy_rounds = [run_busy_round(present[run % len(present):] + present[:run % len(present)],
                                  pool, args, seed=11 + run) for run in range(args.runs)]
    systems = {name: summarise([r[name] for r in rounds]) for name in present}
    peers = [p for p in present if p != "rocks-timer"]
    ratios = {p: round_ratios(rounds, p) for p in peers}
    targets = {f"{key} >= {x:g}x {peer}": (ratios[peer][key] >= x if peer in ratios else None)
               for key, peer, x in TARGETS}
    busy_systems = {name: summarise([r[name] for r in busy_rounds]) for name in present}
    busy_ratios = {p: round_ratios(busy_rounds, p, BUSY_FIGURES) for p in peers}
    busy_targets = {f"{key} >= {x:g}x {peer}": (busy_ratios[peer][key] >= x
                                                 if peer in busy_ratios else None)
                    for key, peer, x in TARGETS}
    result = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "body_bytes": BODY_BYTES,
        "loadavg_before_after": [list(load_before), list(os.getloadavg())],
        "versions": {p: version(VERSION_COMMANDS[p]) for p in peers},
        "missing": missing,
        "methods": {name: SYSTEMS[name][0].methods for name in present},
        "systems": systems, "ratios": ratios, "targets": targets,
        "busy": {"delays_ms": [0, BUSY_MAX_DELAY_MS], "systems": busy_systems,
                 "ratios": busy_ratios, "targets": busy_targets}}
    path = write_result("peers", result, args.results_dir)
    for mode, rows, found in (("deliverer idle (sends due in 1 h)",
                               table(systems, ratios, args), targets),
                              ("deliverer busy (sends due in 0-2 s)",
                               table(busy_systems, busy_ratios, args, BUSY_FIGURES),
                               busy_targets)):
        print(f"\n{mode}:\n" + "\n".join(rows))
        for label, met in found.items():
            state = "not measured (peer missing)" if met is None else ("met" if met else "NOT met")
            print(f"target {label} ({mode.split(' (')[0]}): {state}")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
