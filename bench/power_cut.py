"""Power cuts under the strict POSIX model (``bench.power_cut_model``), swept densely.

    python -m bench.power_cut [--cases all] [--seeds 3] [--spread 7] [--rounds 40]

A seeded workload (timer sends of short and long delays, delay-level and immediate sends,
cancels) runs under a manual clock and is then driven until everything fell due, with
relocations asked for every second on the ``vlog`` layout; the model cuts the power before
chosen system calls: aimed ones (early after the first start, inside deliveries, value-segment,
CommitLog and TimerLog rolls, periodic flushes, segment releases and relocations) and one every
``--spread`` calls. Each cut image is reopened and driven until everything is due, then
:func:`check_cut` asks: nothing acknowledged (``sync``) or flushed (``async``) lost, no
acknowledged cancel delivered, nothing early, nothing delivered twice by the RocksDB engine,
nothing left pending, ``check`` clean after the reopen and at the end, no damage reported and
nothing set aside. tests/faults/test_power_cut.py runs the same workload with fewer cuts; this
sweeps more seeds and denser cut points and writes ``bench/results/power_cut.json``.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import write_result
from bench.power_cut_model import StrictDisk
from rocks_timer import Broker, BrokerConfig, ManualClock, Message

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the suite's manual clock start

TOPICS = ("orders", "billing")
ROUNDS = 40  # ticks of 100 ms of the workload
MAX_DELAY_MS = 12_000


@dataclass
class Ledger:
    """What the workload was told so far, and what had been flushed."""

    sent: list = field(default_factory=list)  # (msg_id, topic, due_ms, route), acknowledged order
    timer_ids: set = field(default_factory=set)      # sends that went to the timer engine
    cancelled: list = field(default_factory=list)   # msg_ids whose cancel returned True
    cancel_tried: set = field(default_factory=set)  # every msg_id a cancel was asked for
    flushed_sent: int = 0                            # prefix of ``sent`` covered by a flush
    flushed_cancelled: int = 0
    now_ms: int = START_MS

    def snapshot(self, everything: bool) -> dict:
        sent = self.sent if everything else self.sent[:self.flushed_sent]
        cancelled = set(self.cancelled if everything
                        else self.cancelled[:self.flushed_cancelled])
        # a cancel asked for but not (or not yet durably) acknowledged may go either way
        return {"must": {m: (t, due, route) for m, t, due, route in sent
                         if m not in self.cancel_tried},
                "cancelled": cancelled, "timer_ids": set(self.timer_ids),
                "last_due_ms": max([due for _, _, due, _ in self.sent], default=self.now_ms),
                "now_ms": self.now_ms}


def _watch_flushes(broker: Broker, ledger: Ledger, disk: StrictDisk) -> None:
    """Count what was acknowledged when each flush began (it covers exactly that)."""
    flush = broker.flush

    def counted() -> None:
        sent, cancelled = len(ledger.sent), len(ledger.cancelled)
        phase, disk.phase = disk.phase, "flush"
        try:
            flush()
        finally:
            disk.phase = phase
        ledger.flushed_sent, ledger.flushed_cancelled = sent, cancelled

    broker.flush = counted


def _workload_round(broker: Broker, rng: random.Random, ledger: Ledger, handles: dict) -> None:
    for _ in range(rng.randint(1, 5)):
        topic = rng.choice(TOPICS)
        body = rng.randbytes(rng.choice((20, 300, 2_000, 2_000)))
        kind = rng.random()
        if kind < 0.35:
            result = broker.send(Message(topic=topic, body=body), delay_ms=rng.randint(50, 3_000))
        elif kind < 0.6:  # long enough for their segments to be relocated once cancelled
            result = broker.send(Message(topic=topic, body=body),
                                 delay_ms=rng.randint(8_000, MAX_DELAY_MS))
        elif kind < 0.8:
            result = broker.send(Message(topic=topic, body=body), delay_level=1)  # 1 s
        else:
            result = broker.send(Message(topic=topic, body=body))
        if result.handle is not None:
            handles[result.msg_id] = result.handle
            ledger.timer_ids.add(result.msg_id)
        ledger.sent.append((result.msg_id, topic, result.deliver_at_ms, result.route))
    while handles and rng.random() < 0.45:
        msg_id = rng.choice(sorted(handles))
        ledger.cancel_tried.add(msg_id)
        if broker.cancel(handles.pop(msg_id)):
            ledger.cancelled.append(msg_id)


def _delivered(broker: Broker) -> list:
    return [m for topic in TOPICS for m in pulled(broker, topic)]


def _in(part: str) -> "callable":
    return lambda e: e.path is not None and f"{os.sep}{part}" in e.path


def _aim(disk: StrictDisk, engine: str, mode: str) -> None:
    """The cut points: where the promises are made and where files come and go."""
    def created(pattern: str):
        regex = re.compile(pattern)
        return lambda e: e.op in ("create", "mkdir") and e.path is not None \
            and regex.search(e.path) is not None

    disk.cut_at("early: after the first start", lambda e: True, occurrence=60)
    disk.cut_at("early: the first sends", lambda e: e.phase == "work", occurrence=8)
    for delay in (1, 4, 12):  # the first roll: the sealed segment's sync, the new name, writes
        disk.cut_at(f"CommitLog roll +{delay}", created(r"/commitlog/\d+$"), 1, delay)
    disk.cut_at("delivery", lambda e: e.phase == "deliver", occurrence=6)
    disk.cut_at("delivery, later", lambda e: e.phase == "deliver", occurrence=120)
    if mode != "sync":
        disk.cut_at("periodic flush", lambda e: e.phase == "flush", occurrence=5, delay=1)
    if engine == "wheel":
        disk.cut_at("TimerLog start", created(r"/timerlog/\d+$"), 0, 8)
        disk.cut_at("wheel checkpoint", _in("timercheck"), occurrence=6)
        return
    disk.cut_at("RocksDB WAL sync", lambda e: e.op in ("sync-write", "flush_wal"),
                40 if mode == "sync" else 6)
    for n in (0, 1):
        disk.cut_at(f"memtable flush {n}", lambda e: e.op == "memtable-flushed", n)
    if engine == "rocksdb":
        for n, delay in ((0, 3), (1, 6), (3, 2)):
            disk.cut_at(f"value segment roll {n}", created(r"\.vlog$"), n, delay)
        disk.cut_at("segment release", lambda e: e.thread == "vlog-release", 0)
        for n in (0, 2, 4):  # the WAL synced, the files not yet gone
            disk.cut_at(f"segment release {n}: WAL synced", lambda e: e.thread == "vlog-release"
                        and e.op == "wal-synced", n)
        disk.cut_at("segment release, unlink", lambda e: e.thread == "vlog-release"
                    and e.op == "unlink", 0)
        disk.cut_at("relocation", lambda e: e.thread == "vlog-relocate"
                    or e.phase == "relocate", 2)
        disk.cut_at("relocation, re-point", lambda e: e.thread == "vlog-relocate"
                    or e.phase == "relocate", 0, 14)


CASES = [(engine, mode) for engine in ("rocksdb", "rocksdb-inline", "wheel")
         for mode in ("sync", "async")] + [("rocksdb", "async-wal-sync")]


def engine_settings(engine: str) -> dict:
    """BrokerConfig settings of an engine name ("rocksdb-<layout>")."""
    name, _, layout = engine.partition("-")
    return {"timer_engine": name, **({"rocksdb_layout": layout} if layout else {})}


def pulled(broker, topic: str, queue_id: int = 0) -> list:
    out, offset = [], 0
    while True:
        page = broker.pull(topic, queue_id, offset, 1000)
        if not page:
            return out
        out.extend(page)
        offset = page[-1].queue_offset + 1


def run_cuts(tmp_path: Path, engine: str, mode: str, spread_every: int | None = None,
             seed: str = "", rounds: int = ROUNDS) -> tuple[StrictDisk, BrokerConfig]:
    """Run the workload under the model, cutting at the aimed points (and every
    ``spread_every`` events); returns the model with its cut images, and the configuration."""
    settings = {**engine_settings(engine), "flush_disk_type": mode.split("-")[0],
                "rocksdb_sync": mode == "async-wal-sync", "flush_interval_ms": 500,
                "commitlog_segment_size": 64 * 1024, "max_message_size": 8 * 1024,
                "flush_delay_offset_interval_ms": 300, "timer_flush_interval_ms": 300,
                "vlog_segment_bytes": 64 * 1024, "vlog_reclaim_live_pct": 60,
                "vlog_reclaim_min_pinned_sec": 1}
    if engine == "wheel":
        settings["timer_precision_ms"] = 1_000  # a 38 MB slot file instead of 387 MB
    config = BrokerConfig(**settings).validate()
    rng = random.Random(f"{engine}-{mode}{seed}")
    ledger, handles = Ledger(), {}
    everything = mode == "sync"
    (tmp_path / "cuts").mkdir()
    disk = StrictDisk(tmp_path / "data", tmp_path / "cuts",
                      capture=lambda: ledger.snapshot(everything))
    _aim(disk, engine, mode)
    if spread_every:
        for k in range(1, 1000):
            disk.cut_at(f"spread {k}", lambda e, k=k: e.seq == k * spread_every)
    clock = ManualClock(START_MS)
    with disk, Broker.open(tmp_path / "data", config, clock=clock) as broker:
        _watch_flushes(broker, ledger, disk)
        for round_no in range(rounds + 150):
            if round_no < rounds:
                disk.phase = "work"
                _workload_round(broker, rng, ledger, handles)
            clock.advance(100)
            ledger.now_ms = clock.now_ms()
            disk.phase = "deliver"
            broker.tick()
            disk.phase = None
            if round_no % 10 == 9 and engine == "rocksdb":
                disk.phase = "relocate"
                broker.timer.relocate(clock.now_ms())
                disk.phase = None
            if round_no % 20 == 13 and engine.startswith("rocksdb"):
                broker.timer.flush()  # memtables to SSTs: durable like a synced WAL
                disk.mark("memtable-flushed")
        broker.timer.wait_for_maintenance() if engine.startswith("rocksdb") else None
    return disk, config


def check_cut(cut, config: BrokerConfig, exactly_once: bool) -> str | None:
    """Reopen a cut image, drive it until everything is due; None, or what went wrong."""
    promised = cut.context
    now = promised["now_ms"]
    clock = ManualClock(now)
    try:
        with Broker.open(cut.path, config, clock=clock) as broker:
            opened = broker.check()
            # sends in progress at the cut may have landed too: drive past the longest delay
            until = max(promised["last_due_ms"], now + MAX_DELAY_MS) + 2_000
            while clock.now_ms() < until:
                clock.advance(500)
                broker.tick()
            for _ in range(5):
                broker.tick()
            delivered = _delivered(broker)
            stats = broker.stats()
            pending = stats["pending"]
            report = broker.check()
    except Exception as exc:  # noqa: BLE001 - the reopen failing is what is reported
        return f"reopen failed: {type(exc).__name__}: {exc}"
    seen = Counter(m.msg_id for m in delivered)
    missing = [m for m in promised["must"] if m not in seen]
    if missing:
        routes = Counter(promised["must"][m][2] for m in missing)
        return f"{len(missing)} of {len(promised['must'])} promised sends lost ({dict(routes)})"
    resurrected = [m for m in promised["cancelled"] if m in seen]
    if resurrected:
        return f"{len(resurrected)} acknowledged cancels delivered, e.g. {resurrected[:3]}"
    for message in delivered:
        due = promised["must"].get(message.msg_id, (None, None, None))[1]
        if due is not None and message.store_ms < due:
            return f"{message.msg_id} delivered early"
    if exactly_once:
        twice = [m for m, n in seen.items() if n > 1 and m in promised["timer_ids"]]
        if twice:
            return f"{len(twice)} delivered twice, e.g. {twice[:3]}"
    if pending:
        return f"{pending} still pending after everything fell due"
    if not opened.ok:
        return f"check after the reopen: {opened.problems[:3]}"
    if not report.ok:
        return f"check after delivering everything: {report.problems[:3]}"
    timer = stats["timer"]
    damage = {name: timer[name] for name in ("corrupt", "vlog_short_segments",
                                             "vlog_missing_segments", "vlog_lost")
              if timer.get(name)}
    if damage:  # an unflushed send is lost whole or not at all, never set aside as damage
        return f"damage reported: {damage}"
    return None




def tmpfs_dir() -> Path | None:
    """A scratch directory on tmpfs, when there is one: the model decides what survives, so
    real fsyncs (most of the time on a disk) buy nothing here."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="power-cut-", dir=shm))
    return None


def sweep(case: tuple[str, str], seed: int, spread: int, rounds: int, base: Path | None) -> dict:
    engine, mode = case
    scratch = Path(tempfile.mkdtemp(prefix="power-cut-", dir=base))
    try:
        disk, config = run_cuts(scratch, engine, mode, spread_every=spread, seed=str(seed),
                                rounds=rounds)
        failures = []
        for cut in disk.taken:
            why = check_cut(cut, config, exactly_once=engine.startswith("rocksdb"))
            if why:
                failures.append(f"{cut.label} (event {cut.event.seq} {cut.event.op} "
                                f"{cut.event.thread}): {why}")
        promised = sum(len(cut.context["must"]) for cut in disk.taken)
        return {"engine": engine, "mode": mode, "seed": seed, "system_calls": disk.events,
                "cuts": len(disk.taken), "promised_checked": promised,
                "failed": len(failures), "failures": failures[:20]}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.power_cut", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="all",
                        help="comma-separated engine:mode pairs (e.g. rocksdb:async), or all")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--spread", type=int, default=7, help="a cut every N system calls")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="workload rounds of 100 ms")
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    cases = CASES if args.cases == "all" else [tuple(c.split(":")) for c in args.cases.split(",")]
    shm = tmpfs_dir()
    rows, started = [], time.monotonic()
    try:
        for case in cases:
            for seed in range(args.seeds):
                row = sweep(case, seed, args.spread, args.rounds, shm)
                rows.append(row)
                print(f"{row['engine']:>15} {row['mode']:<15} seed {seed}: {row['cuts']:4d} cuts "
                      f"of {row['system_calls']:5d} calls, {row['promised_checked']:6d} promises "
                      f"checked, {row['failed']} failed", flush=True)
                for failure in row["failures"]:
                    print(f"    {failure}")
    finally:
        if shm is not None:
            shutil.rmtree(shm, ignore_errors=True)
    total = {"cuts": sum(r["cuts"] for r in rows), "failed": sum(r["failed"] for r in rows),
             "promised_checked": sum(r["promised_checked"] for r in rows),
             "seconds": round(time.monotonic() - started, 1)}
    print(f"total: {total['cuts']} cuts, {total['promised_checked']} promises checked, "
          f"{total['failed']} failed, {total['seconds']} s")
    path = write_result("power_cut", {"spread": args.spread, "seeds": args.seeds,
                                      "rounds": args.rounds, "total": total, "runs": rows},
                        args.results_dir)
    print(f"wrote {path}")
    return 1 if total["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
