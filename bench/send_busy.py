"""Where a send waits while the deliverer works (issue 26): per-thread CPU and switches.

    python -m bench.send_busy [--messages 40000] [--batch 1] [--perf FILE]

A started broker (real clock, defaults) takes ``--messages`` 1 KiB messages, ``--batch`` per
call, twice on fresh data dirs: due in an hour (the deliverer idle), then each call's due 0-2 s
after it (the deliverer busy meanwhile). Printed for each: the send rate, and for every thread of
the process (named after its Python thread through /proc) its CPU time (user, system) and
voluntary / involuntary context switches during the sends, and the collector's runs by thread
and generation. ``--perf FILE`` records the busy phase with ``perf record -F 1999 -p <pid>``
(then ``perf report -i FILE --sort comm,dso,sym``). Writes no results file.
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import signal
import subprocess
import sys
import threading
import time

from bench.common import scratch_dir
from rocks_timer import Broker, BrokerConfig, Message, SystemClock

TICK = os.sysconf("SC_CLK_TCK")


def name_threads() -> None:
    names = {t.native_id: t.name for t in threading.enumerate()}
    for tid in os.listdir("/proc/self/task"):
        name = names.get(int(tid))
        if name:
            try:
                with open(f"/proc/self/task/{tid}/comm", "w") as f:
                    f.write(name[:15])
            except OSError:
                pass


def thread_figures() -> dict:
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/status") as f:
                status = dict(line.split(":", 1) for line in f if "ctxt" in line)
        except OSError:
            continue
        out[(tid, comm)] = (int(fields[11]) / TICK, int(fields[12]) / TICK,
                            int(status["voluntary_ctxt_switches"]),
                            int(status["nonvoluntary_ctxt_switches"]))
    return out


def run(mode: str, n: int, batch: int, perf: str | None, rng: random.Random,
        pool: list[bytes]) -> None:
    collections: dict[tuple[str, int], list] = {}
    started: dict = {}

    def on_gc(phase: str, info: dict) -> None:
        key = (threading.current_thread().name, info["generation"])
        if phase == "start":
            started[key] = time.perf_counter()
        else:
            entry = collections.setdefault(key, [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - started.pop(key, time.perf_counter())

    with scratch_dir(prefix=f"send-{mode}-") as d:
        broker = Broker.open(d, BrokerConfig(), clock=SystemClock()).start()
        name_threads()
        msgs = [Message("peers", pool[i % len(pool)]) for i in range(n)]
        for m in msgs:
            m.encoded_properties  # as bench.peers prepares them
        calls = n if batch == 1 else n // batch
        delays = [3_600_000 if mode == "idle" else rng.randrange(2001) for _ in range(calls)]
        gc.collect()
        gc.freeze()
        recorder = None
        if perf and mode == "busy":
            recorder = subprocess.Popen(["perf", "record", "-F", "1999", "-q", "-o", perf, "-p",
                                         str(os.getpid())], stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        gc.callbacks.append(on_gc)
        before = thread_figures()
        start = time.perf_counter()
        if batch == 1:
            for m, delay in zip(msgs, delays):
                broker.send(m, delay_ms=delay)
        else:
            for i, delay in zip(range(0, n, batch), delays):
                broker.send_batch(msgs[i:i + batch], delay_ms=delay)
        elapsed = time.perf_counter() - start
        after = thread_figures()
        gc.callbacks.remove(on_gc)
        delivered = broker.deliverer.delivered
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)
            recorder.wait()
        print(f"{mode} (batch {batch}): {n / elapsed:,.0f} msg/s in {elapsed:.2f} s; "
              f"delivered meanwhile {delivered:,}")
        for key in sorted(after, key=lambda k: before.get(k, (0, 0))[0] - after[k][0]
                          + before.get(k, (0, 0))[1] - after[k][1]):
            b = before.get(key, (0, 0, 0, 0))
            a = after[key]
            user, system, vol, invol = (a[i] - b[i] for i in range(4))
            if user + system > 0.005 or vol > 100:
                print(f"  {key[1]:16s} CPU {user + system:.2f} s (user {user:.2f}, system "
                      f"{system:.2f}), switches {vol:,} voluntary, {invol:,} involuntary")
        print("  collections:", {f"{k[0]}/gen{k[1]}": (v[0], round(v[1], 3))
                                 for k, v in sorted(collections.items())})
        gc.unfreeze()
        broker.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.send_busy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--perf", default=None, metavar="FILE")
    args = parser.parse_args(argv)
    threading.current_thread().name = "sender"
    rng = random.Random(7)
    pool = [rng.randbytes(1024) for _ in range(256)]
    for mode in ("idle", "busy"):
        run(mode, args.messages, args.batch, args.perf, rng, pool)
    return 0


if __name__ == "__main__":
    sys.exit(main())
