"""Instructions the metric counters add to the hot paths (issue 28), counted by valgrind's
callgrind: executed instructions do not depend on what else the machine runs, so this figure
holds where a timing of a 1% difference drowns in a neighbour's noise.

    python -m bench.metrics_instructions [--sends 2000] [--batches 100] [--deliver 20000]

For each path and each variant ("off": the tallies replaced by a C builtin that does nothing, as
in ``bench.metrics_cost``; "counters": the broker as shipped), a child process opens a fresh
broker under a manual clock, warms the path up, then runs it inside ``functools.reduce``, and
callgrind counts only what the calling thread executes inside that call
(``--toggle-collect=functools_reduce``; the broker calls ``reduce`` nowhere):

- send1: ``Broker.send`` one message at a time (1 KiB bodies, delays of 1-61 s);
- send100: ``Broker.send_batch`` of 100;
- deliver: ``Broker.tick`` until every due message is in its topic (the deliverer's step, which
  keeps the delivery tally, runs on the calling thread; the CommitLog writer's thread is not
  counted, so the counters' share of the whole delivery path is smaller than shown here).

The scrape (the server's answer to ``/metrics``) is work per scrape, not per message: its CPU per
scrape is in ``bench.metrics_cost``'s ``scrape_cost``. Results:
bench/results/metrics-instructions.json and a markdown summary. Needs ``valgrind`` (Debian's
package; ``make valgrind`` installs it).
"""
from __future__ import annotations

import argparse
import functools
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import markdown_table, scratch_dir, write_result
from bench.metrics_cost import T0, NoDelayTally, NoDeliveryTally
from rocks_timer import Broker, BrokerConfig, ManualClock, Message

PATHS = ("send1", "send100", "deliver")
VARIANTS = ("off", "counters")
ROOT = Path(__file__).resolve().parent.parent


def child(variant: str, path: str, n: int) -> None:
    """Run ``n`` operations of ``path`` inside ``functools.reduce`` (what callgrind counts)."""
    rng = random.Random(28)
    pool = [rng.randbytes(1024) for _ in range(64)]
    with scratch_dir(prefix=f"metrics-ir-{variant}-") as d:
        clock = ManualClock(T0)
        broker = Broker.open(d / "b", BrokerConfig(), clock=clock)
        if variant == "off":
            broker.deliverer.tally = NoDeliveryTally()
            broker.delays = NoDelayTally()
        send, send_batch = broker.send, broker.send_batch
        for i in range(200):  # warm-up: first calls fill caches and build lazy state
            send(Message("orders", pool[i % 64]), delay_ms=1_000 + i)
        send_batch([Message("orders", pool[i % 64]) for i in range(100)], delay_ms=1_000)
        if path == "send1":
            msgs = [Message("orders", pool[i % 64]) for i in range(n)]
            functools.reduce(lambda i, m: send(m, delay_ms=1_000 + i % 60_000) and i + 1,
                             msgs, 0)
        elif path == "send100":
            batches = [[Message("orders", pool[(i + j) % 64]) for j in range(100)]
                       for i in range(n)]
            functools.reduce(lambda i, b: send_batch(b, delay_ms=1_000 + i * 7 % 60_000) and
                             i + 1, batches, 0)
        else:
            for i in range(0, n, 100):
                send_batch([Message("orders", pool[(i + j) % 64]) for j in range(100)],
                           delay_ms=10_000 + i % 60_000)
            clock.set(T0 + 5_000)  # warm-up: deliver the warm-up's 300 messages first
            while broker.deliverer.delivered < 300:
                broker.tick()
            clock.set(T0 + 3_600_000)
            total = n + 300
            before = broker.deliverer.delivered
            functools.reduce(lambda done, _: done + broker.tick(),
                             iter(lambda: broker.deliverer.delivered < total, False), 0)
            assert broker.deliverer.delivered == total
            n = total - before
        broker.close()
    print(n * 100 if path == "send100" else n)  # the messages counted


def count(variant: str, path: str, n: int) -> tuple[int, int]:
    """(instructions callgrind counted, messages they handled) in one child run."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise RuntimeError("valgrind is not installed (apt-get install -y valgrind)")
    with tempfile.TemporaryDirectory(prefix="metrics-ir-") as tmp:
        out = Path(tmp) / "callgrind.out"
        done = subprocess.run([valgrind, "--tool=callgrind", "--collect-atstart=no",
                               "--toggle-collect=functools_reduce",
                               f"--callgrind-out-file={out}", sys.executable, "-m",
                               "bench.metrics_instructions", "--child", variant, path, str(n)],
                              cwd=ROOT, check=True, capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": "0"})  # same dict probes
        found = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.M)
        if found is None:
            raise RuntimeError("callgrind wrote no totals")
        return int(found.group(1)), int(done.stdout.split()[-1])


def bench_instructions(sends: int, batches: int, deliver: int) -> dict:
    ops = {"send1": sends, "send100": batches, "deliver": deliver}
    out: dict = {"operations": ops}
    for variant in VARIANTS:
        out[variant] = {}
        for p in PATHS:
            instructions, messages = count(variant, p, ops[p])
            out[variant][p] = round(instructions / messages)
    out["counters_added_per_message"] = {p: out["counters"][p] - out["off"][p] for p in PATHS}
    out["off_vs_counters"] = {p: round(out["off"][p] / out["counters"][p], 4) for p in PATHS}
    return out


def summary(result: dict) -> list[str]:
    head = ["path", "instructions a message, off", "counters", "added", "off / counters"]
    paths = (("send1", "`Broker.send`"), ("send100", "`Broker.send_batch(100)`"),
             ("deliver", "delivery (the stepping thread)"))
    return markdown_table(head, [[label, f"{result['off'][path]:,}",
                                  f"{result['counters'][path]:,}",
                                  f"{result['counters_added_per_message'][path]:,}",
                                  f"{result['off_vs_counters'][path]:.2%}"]
                                 for path, label in paths])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sends", type=int, default=2_000, help="single sends counted")
    parser.add_argument("--batches", type=int, default=100, help="batches of 100 counted")
    parser.add_argument("--deliver", type=int, default=20_000, help="deliveries counted")
    parser.add_argument("--results-dir", type=Path, default=None)
    parser.add_argument("--child", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        variant, path, n = args.child
        child(variant, path, int(n))
        return 0
    result = bench_instructions(args.sends, args.batches, args.deliver)
    path = write_result("metrics-instructions", {"args": {k: str(v) for k, v in
                                                          vars(args).items()}, **result},
                        args.results_dir)
    print("\n".join(summary(result)))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
