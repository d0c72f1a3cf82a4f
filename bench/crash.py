"""Crash soak for the RocksDB engine: ``kill -9`` a broker in the middle of send / cancel /
deliver, restart, and check exactly-once delivery.

    python -m bench.crash --trials 200                    # the soak (vlog layout, the default)
    python -m bench.crash --trials 200 --layout inline    # the inline layout
    python -m bench.crash --trials 200 --repair-every 10 --kill-in-repair   # issue 30

With ``--repair-every N``, ``rtimer repair --rebuild`` runs (a real subprocess) after every Nth
kill: the index is rebuilt from what the layout keeps (vlog: the value segments and their
removal records), so a removal record missing anywhere shows up as a resurrected message. With
``--kill-in-repair`` every other such repair is first started and killed (SIGKILL) at a random
moment, and the next one must finish it. Each repair must exit 0 (nothing lost).

In the ``vlog`` layout every other trial forces relocation to run often: 64 KiB value segments,
θ = 90% and delays up to 3 s, so records are relocated (and segments released) while the child
is killed. After the last trial the store's invariant check (liveness rows = index) must pass.

A child process runs a Broker (real clock, background delivery) and prints a line after each
acknowledged step: ``ACK <topic> <msg_id> <handle> <key>``, ``CANCELLING <msg_id>`` before a
cancel and ``CANCELLED <msg_id> <True|False>`` after it; most messages carry a business key, and
the child mixes in reschedules (by handle and by key) and cancels by key (``bench.crash_keys``,
``--no-keys`` turns them off). The parent kills it at a random moment (seeded), restarts it on
the same data dir, and after the last trial drains everything and checks: every acknowledged,
uncancelled message is in its topic exactly once; no message cancelled (by handle or by key)
appears; nothing appears twice; no copy was delivered from a key older than its last
acknowledged reschedule ("stale") or before its due time ("early").
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench.crash_keys import KeyedChild, KeyedLedger, pick_key

TOPICS = ("orders", "payments")


def child_config(layout: str, heavy: bool):
    from rocks_timer import BrokerConfig

    config = BrokerConfig(timer_engine="rocksdb", timer_precision_ms=10, timer_deliver_batch=64,
                          rocksdb_layout=layout)
    if heavy:  # relocation runs often: small segments, a high θ
        config = config.replace(vlog_segment_bytes=64 << 10, vlog_reclaim_live_pct=90,
                                vlog_reclaim_min_pinned_sec=0)
    return config


def child(data_dir: str, seed: int, layout: str, heavy: bool, keyed: bool = True) -> None:
    from rocks_timer import Broker, Message

    rng = random.Random(seed)
    config = child_config(layout, heavy)
    max_delay = 3_000 if heavy else 300
    with Broker.open(data_dir, config) as broker:
        broker.start()
        print("READY", flush=True)
        keys = KeyedChild()
        while True:
            batch = [Message(rng.choice(TOPICS), os.urandom(rng.randint(10, 400)),
                             keys=[k] if (k := pick_key(rng)) and keyed else ())
                     for _ in range(rng.randint(1, 20))]
            for m, r in zip(batch, broker.send_batch(batch, delay_ms=rng.randint(0, max_delay))):
                print(keys.acked(r.topic, r.msg_id, r.handle, m.keys[0] if m.keys else None),
                      flush=False)
            sys.stdout.flush()
            if keys.ids and rng.random() < 0.3:
                msg_id = keys.ids[rng.randrange(len(keys.ids))]
                print(f"CANCELLING {msg_id}", flush=True)
                print(f"CANCELLED {msg_id} {broker.cancel(keys.handle[msg_id])}", flush=True)
            if keyed:
                keys.step(broker, rng, max_delay, print)


@dataclass
class Ledger:
    acked: dict[str, str] = field(default_factory=dict)      # msg_id -> topic
    cancelling: set[str] = field(default_factory=set)
    cancelled_true: set[str] = field(default_factory=set)
    cancelled_false: set[str] = field(default_factory=set)
    keyed: KeyedLedger = field(default_factory=KeyedLedger)

    def read(self, text: str) -> None:
        for line in text.splitlines():
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "ACK" and len(parts) in (4, 5):
                self.acked[parts[2]] = parts[1]
                if len(parts) == 5:
                    self.keyed.read(parts)
            elif self.keyed.read(parts):
                continue
            elif len(parts) == 2 and parts[0] == "CANCELLING":
                self.cancelling.add(parts[1])
            elif len(parts) == 3 and parts[0] == "CANCELLED":
                (self.cancelled_true if parts[2] == "True" else self.cancelled_false).add(parts[1])


def run_trial(data_dir: Path, seed: int, ledger: Ledger, rng: random.Random,
              layout: str = "vlog", heavy: bool = False, keyed: bool = True) -> float:
    proc = subprocess.Popen([sys.executable, "-m", "bench.crash", "--child", str(data_dir),
                             "--seed", str(seed), "--layout", layout]
                            + (["--heavy"] if heavy else []) + ([] if keyed else ["--no-keys"]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=Path(__file__).resolve().parent.parent)
    started = time.monotonic()
    assert proc.stdout is not None
    first = proc.stdout.readline().decode()
    if not first.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"child did not start: {first!r} {proc.stderr.read().decode()[-2000:]}")
    alive_s = rng.uniform(0.05, 1.2)
    time.sleep(alive_s)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # read through the buffered reader: ``readline`` above may already hold lines printed just
    # after READY (``communicate`` reads the pipe's fd directly and would drop them)
    out = proc.stdout.read()
    proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    ledger.read(out.decode(errors="replace").rsplit("\n", 1)[0])  # drop a torn last line
    ledger.keyed.end_trial()
    return time.monotonic() - started


def verify(data_dir: Path, ledger: Ledger, layout: str = "vlog") -> dict:
    from rocks_timer import Broker

    with Broker.open(data_dir, child_config(layout, False)) as broker:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            broker.tick()
            if broker.stats()["pending"] == 0:
                break
            time.sleep(0.05)
        seen: Counter[str] = Counter()
        copies = []
        for topic in TOPICS:
            offset = 0
            while page := broker.pull(topic, 0, offset, 1000):
                seen.update(m.msg_id for m in page)
                copies.extend((m.msg_id, int(m.properties["TIMER_OUT_MS"]),
                               int(m.properties["TIMER_DELIVER_MS"]), m.store_ms)
                              for m in page if "TIMER_OUT_MS" in m.properties)
                offset = page[-1].queue_offset + 1
        pending = broker.stats()["pending"]
        broker.timer.wait_for_maintenance()
        problems = broker.timer.check()["problems"]
        timer_figures = broker.timer.stats().extra
    keyed = ledger.keyed
    cancelled = ledger.cancelled_true | keyed.cancelled_by_key
    unknown = (ledger.cancelling - ledger.cancelled_true - ledger.cancelled_false) | (
        keyed.cancel_unknown - cancelled)
    must = {i for i in ledger.acked if i not in cancelled and i not in unknown}
    judged = keyed.judge(copies)
    return {
        "acknowledged": len(ledger.acked),
        "cancelled_true": len(ledger.cancelled_true),
        "cancelled_by_key": len(keyed.cancelled_by_key),
        "key_cancels": keyed.key_cancels,
        "rescheduled": keyed.rescheduled,
        "reschedule_unknown": len(keyed.loose),
        "cancel_unknown": len(unknown),
        "delivered": sum(seen.values()),
        "missing": sorted(i for i in must if seen[i] == 0),
        "duplicated": sorted(i for i, n in seen.items() if n > 1),
        "cancelled_but_delivered": sorted(i for i in cancelled if seen[i]),
        "delivered_stale": sorted(judged["stale"]),
        "delivered_early": sorted(judged["early"]),
        "left_pending": pending,
        "check_problems": problems,
        "layout": timer_figures.get("layout"),
        "vlog_relocated_count": timer_figures.get("vlog_relocated_count", 0),
        "vlog_released_segments": timer_figures.get("vlog_released_segments", 0),
        "corrupt": timer_figures.get("corrupt", 0),
    }


def run_repair(data_dir: Path, rng: random.Random, kill: bool, repairs: dict) -> None:
    """``rtimer repair --rebuild`` on the data dir; first started and killed when ``kill``."""
    command = [sys.executable, "-m", "cli.main", "--data-dir", str(data_dir), "repair",
               "--rebuild", "--json"]
    cwd = Path(__file__).resolve().parent.parent
    if kill:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                cwd=cwd)
        time.sleep(rng.uniform(0.0, 0.6))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            repairs["killed"] += 1
        proc.wait()
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd)
    repairs["runs"] += 1
    try:
        result = json.loads(done.stdout)
    except ValueError:
        result = {"error": done.stderr[-500:]}
    if done.returncode != 0:
        repairs["failures"].append(result)
    else:
        repairs["recovered"] = result.get("recovered", 0)


def soak(data_dir: Path, trials: int, seed: int, layout: str = "vlog",
         keyed: bool = True, repair_every: int = 0, kill_in_repair: bool = False) -> dict:
    rng = random.Random(seed)
    ledger = Ledger()
    started = time.monotonic()
    repairs: dict = {"runs": 0, "killed": 0, "failures": [], "recovered": 0}
    for trial in range(trials):
        heavy = layout == "vlog" and trial % 2 == 1
        run_trial(data_dir, seed * 100_003 + trial, ledger, rng, layout, heavy, keyed)
        if repair_every and (trial + 1) % repair_every == 0:
            run_repair(data_dir, rng, kill_in_repair and (trial + 1) // repair_every % 2 == 1,
                       repairs)
    report = verify(data_dir, ledger, layout)
    report.update(trials=trials, seed=seed, seconds=round(time.monotonic() - started, 1),
                  repairs=repairs["runs"], repairs_killed=repairs["killed"],
                  repair_failures=repairs["failures"])
    report["ok"] = not (report["missing"] or report["duplicated"]
                        or report["cancelled_but_delivered"] or report["left_pending"]
                        or report["delivered_stale"] or report["delivered_early"]
                        or report["check_problems"] or report["repair_failures"])
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.crash", description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("bench/results/crash.json"))
    parser.add_argument("--layout", choices=("vlog", "inline"), default="vlog")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--heavy", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-keys", action="store_true",
                        help="No business keys, reschedules or cancels by key.")
    parser.add_argument("--repair-every", type=int, default=0, metavar="N",
                        help="Run `rtimer repair --rebuild` after every Nth kill (0: never).")
    parser.add_argument("--kill-in-repair", action="store_true",
                        help="Kill every other of those repairs at a random moment first.")
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.seed, args.layout, args.heavy, not args.no_keys)
        return 0
    import tempfile
    scratch = Path(__file__).resolve().parent / "results" / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="rtimer-crash-", dir=scratch))
    report = soak(data_dir, args.trials, args.seed, args.layout, not args.no_keys,
                  args.repair_every, args.kill_in_repair)
    summary = {k: (len(v) if isinstance(v, list) else v) for k, v in report.items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    if args.data_dir is None:
        import shutil
        shutil.rmtree(data_dir, ignore_errors=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
