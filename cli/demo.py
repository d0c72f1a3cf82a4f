"""``rtimer demo``: a real broker on a fresh data dir, a realistic mix of scheduled messages,
a live view of their delivery, and a summary that fails loudly on any broken promise.

The mix (for ``--messages N``): N order-timeout messages through the timer engine (RocksDB by
default) with delays spread uniformly over 2 s .. ``--max-delay``; N/10 reminders on delay
levels 1-3 (1 s, 5 s, 10 s; only the levels within ``--max-delay``); N/10 immediate audit events;
then N/50 of the order timeouts are cancelled right after sending.
"""
from __future__ import annotations

import fcntl
import os
import random
import shutil
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rocks_timer import Broker, Message, SystemClock
from rocks_timer.message import DELAY, TIMER_DELAY_MS

from .demo_report import DemoLedger, render_summary
from .durations import DURATION_HELP, InputError, parse_duration_ms
from .session import Settings

MIN_DELAY_MS = 2_000
SEND_BATCH = 500
POLL_S = 0.1
GRACE_MS = 20_000  # after the last due time, how long to wait for stragglers before calling them lost
SETTLE_MS = 1_000  # after everything arrived, watch this long for duplicates or cancelled copies
TOPICS = {"timer": "order-timeout", "level": "reminder", "immediate": "audit-event"}
DATA_DIR_ENTRIES = {"broker.lock", "commitlog", "config", "consumequeue", "timer-rocksdb",
                    "wheel", "rtimer.sock", "delayOffset.json"}


def _prepare_data_dir(path: Path, force: bool) -> None:
    """Refuse a non-empty dir; with --force, wipe it only if it is an idle rtimer data dir."""
    if not path.exists() or not any(path.iterdir()):
        return
    if not force:
        raise InputError(f"data dir {path} is not empty; the demo needs a fresh one (give "
                         "--force to wipe an old rtimer data dir, or pick another --data-dir)")
    names = {p.name for p in path.iterdir()}
    if "broker.lock" not in names or not names <= DATA_DIR_ENTRIES:
        raise InputError(f"{path} does not look like an rtimer data dir ({', '.join(sorted(names))}); "
                         "the demo will not wipe it")
    fd = os.open(path / "broker.lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise InputError(f"data dir {path} is in use by a running broker; stop it first") from None
    finally:
        os.close(fd)
    for entry in path.iterdir():
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def _workload(rng: random.Random, messages: int, max_delay_ms: int, levels: list[tuple[int, int]]
              ) -> list[tuple[str, Message]]:
    work: list[tuple[str, Message]] = []
    for order in range(messages):
        delay = rng.randint(MIN_DELAY_MS, max_delay_ms)
        body = f'{{"order": {100_000 + order}, "action": "close-if-unpaid"}}'
        work.append(("timer", Message(topic=TOPICS["timer"], body=body.encode(), tags="timeout",
                                      keys=(f"order-{100_000 + order}",),
                                      properties={TIMER_DELAY_MS: str(delay)})))
    for n in range(messages // 10 if levels else 0):
        level = rng.choice(levels)[0]
        work.append(("level", Message(topic=TOPICS["level"], body=f"reminder {n}".encode(),
                                      properties={DELAY: str(level)})))
    for n in range(messages // 10):
        work.append(("immediate", Message(topic=TOPICS["immediate"],
                                          body=f"audit event {n}".encode())))
    rng.shuffle(work)
    return work


@click.command()
@click.option("--messages", type=int, default=3000, show_default=True,
              help="Order-timeout messages (levels and immediate get a tenth each).")
@click.option("--max-delay", default="15s", show_default=True,
              help=f"Longest timer delay, {DURATION_HELP} (2s..10m).")
@click.option("--seed", type=int, default=7, show_default=True, help="Workload seed.")
@click.option("--force", is_flag=True, help="Wipe the data dir first if it is an old, idle "
                                            "rtimer data dir (anything else is refused).")
@click.pass_obj
def demo(settings: Settings, messages: int, max_delay: str, seed: int, force: bool) -> None:
    """Run a real broker on a fresh data dir and watch scheduled messages arrive on time.

    Sends order timeouts through the RocksDB timer engine (delays 2s..--max-delay), reminders
    on delay levels 1-3 and immediate events, cancels a few order timeouts, shows delivery
    live, then a summary per route: sent, delivered, cancelled, lateness p50/p99/max, early
    deliveries, duplicates, lost, throughput. Exits 1 if anything was lost, early, duplicated
    or delivered after a successful cancel. A non-empty data dir is refused unless --force.

    Example: rtimer --data-dir demo-data demo --messages 3000
    """
    if not 10 <= messages <= 200_000:
        raise InputError(f"--messages {messages} is invalid; allowed: 10..200000")
    max_delay_ms = parse_duration_ms(max_delay, "--max-delay")
    if not MIN_DELAY_MS <= max_delay_ms <= 600_000:
        raise InputError(f"--max-delay {max_delay} is invalid; allowed: 2s..10m")
    _prepare_data_dir(settings.data_dir, force)
    config = settings.config()  # a fresh dir: rocksdb unless --engine or --config says otherwise
    levels = [(n, ms) for n, ms in ((1, 1_000), (2, 5_000), (3, 10_000))
              if n <= config.delay_levels.max_level and config.delay_levels.delay_ms(n) <= max_delay_ms]
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)  # logs and CI: no wrapping of the summary table
    rng = random.Random(seed)
    work = _workload(rng, messages, max_delay_ms, levels)
    console.print(f"[bold]rtimer demo[/] on {settings.data_dir} (fresh), engine "
                  f"{config.timer_engine}, {len(work)} messages, delays 2s..{max_delay}, seed {seed}")
    with Broker.open(settings.data_dir, config, clock=SystemClock()) as broker:
        broker.start()
        ledger = DemoLedger()
        started = time.monotonic()
        for i in range(0, len(work), SEND_BATCH):
            chunk = work[i:i + SEND_BATCH]
            for (kind, _), result in zip(chunk, broker.send_batch([m for _, m in chunk])):
                ledger.sent(kind, result)
        ledger.send_seconds = time.monotonic() - started
        victims = rng.sample(ledger.handles(), min(len(ledger.handles()), messages // 50))
        for msg_id, handle in victims:
            ledger.cancel_result(msg_id, broker.cancel(handle))
        console.print(f"sent {ledger.total_sent()} in {ledger.send_seconds:.2f} s, cancelled "
                      f"{len(ledger.cancelled)} order timeouts; delivering...")
        _watch(broker, ledger, console, config.timer_engine)
        engine_stats = broker.stats()
    ok = render_summary(console, ledger, engine_stats)
    if not ok:
        raise SystemExit(1)


def _watch(broker: Broker, ledger: DemoLedger, console: Console, engine: str) -> None:
    offsets = {topic: 0 for topic in TOPICS.values()}
    last_due_ms = ledger.last_due_ms()
    with Progress(TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[note]}"), TimeElapsedColumn(), console=console,
                  refresh_per_second=8) as progress:
        tasks = {kind: progress.add_task(label, total=ledger.expected(kind), note="")
                 for kind, label in (("timer", f"{engine} timer"), ("level", "delay levels"),
                                     ("immediate", "immediate"))}
        done_at_ms = None
        while True:
            for kind, topic in TOPICS.items():
                while batch := broker.pull(topic, 0, offsets[topic], 1_000):
                    offsets[topic] = batch[-1].queue_offset + 1
                    for message in batch:
                        ledger.delivered(kind, message)
            now_ms = broker.clock.now_ms()
            for kind, task in tasks.items():
                progress.update(task, completed=ledger.delivered_count(kind),
                                note=f"pending {ledger.expected(kind) - ledger.delivered_count(kind)}")
            if ledger.all_arrived() and now_ms >= last_due_ms and done_at_ms is None:
                done_at_ms = now_ms
            if done_at_ms is not None and now_ms - done_at_ms >= SETTLE_MS:
                break
            if now_ms > last_due_ms + GRACE_MS:
                break
            time.sleep(POLL_S)
    ledger.watch_seconds = time.monotonic() - ledger.created
