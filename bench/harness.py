"""One measured benchmark cell: a fresh broker, one workload (or shard), simulated time
(docs/WRITE_AMPLIFICATION.md, definitions).

``run_cell`` opens a Broker in its own directory on a real disk (never tmpfs) with a
ManualClock, sends the workload at its send rate, cancels what the workload cancels, advances
simulated time until every message is delivered or cancelled, flushes, lets RocksDB compaction
settle, and returns one flat row (``COLUMNS``) of bytes, write amplification, disk and rates.

Time steps: 1 s while sending (the send rate slices), then per workload an *active* step
(delivery batches) and an *idle* step (nothing due soon): short/burst/cancel/levels 1 s / 5 s,
day 60 s / 600 s, month 600 s / 600 s. At every step ``broker.tick(now)`` runs every service
(deliverer, wheel enqueue/dequeue/flush, level scanners, CommitLog retention every 10 s); a step
is repeated at the same time while it still makes progress, so no engine is cut short.

Pure Python: no pyspark import (the Spark jobs call ``run_cell`` in their workers).
"""
from __future__ import annotations

import bisect
import dataclasses
import os
import resource
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from bench.workloads import SPECS, Workload
from rocks_timer.broker import Broker
from rocks_timer.clock import ManualClock
from rocks_timer.config import BrokerConfig
from rocks_timer.message import (DELAY, SCHEDULE_TOPIC, TIMER_DELAY_MS, TIMER_DELIVER_MS,
                                 UNIQ_KEY, WHEEL_TIMER_TOPIC, Message, encode_properties)

T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
ENGINES = ("rocksdb", "wheel", "levels", "memory")
SEND_CHUNK = 1_000
SEND_STEP_MS = 1_000
# (active step, idle step) per workload
STEPS_MS = {"short": (1_000, 5_000), "burst": (1_000, 5_000), "cancel": (1_000, 5_000),
            "levels": (1_000, 5_000), "day": (60_000, 600_000), "month": (600_000, 600_000)}
DU_EVERY_TICKS = 25
MAX_TICKS_SAME_TIME = 10_000
DEFAULT_WORKDIR = Path(__file__).resolve().parent / "results" / "tmp"
MEMORY_FS = {"tmpfs", "ramfs", "devtmpfs"}

# every row has exactly these columns (zeros where a component does not apply)
COMPONENTS = ("cl_delivery", "cl_timer_topic", "cl_level_topic", "cl_other", "consumequeue",
              "rocks_wal", "rocks_flush", "rocks_compaction", "rocks_vlog", "rocks_relocation",
              "wheel_timerlog", "wheel_slots", "wheel_checkpoint")
TIMER_COMPONENTS = ("rocks_wal", "rocks_flush", "rocks_compaction", "rocks_vlog",
                    "rocks_relocation", "wheel_timerlog", "wheel_slots", "wheel_checkpoint")
COLUMNS = ("engine", "workload", "profile", "messages", "body_size", "shard", "shards", "seed",
           "sent", "cancelled", "delivered", "complete", "payload_bytes", "physical_bytes",
           "cancelled_write_bytes", "logical_bytes", "timer_bytes", *COMPONENTS, "rocks_user",
           "wheel_rolls", "rolls", "wa_physical", "wa_logical", "wa_timer", "peak_disk_bytes",
           "final_disk_bytes", "peak_timer_disk_bytes", "final_timer_disk_bytes",
           "peak_live_payload", "seconds", "send_seconds", "deliver_seconds", "send_per_s",
           "deliver_per_s", "ticks", "sim_ms", "space_amp", "rss_before_open_bytes",
           "peak_rss_bytes", "layout", "workdir", "keys")


# properties a broker or client adds: overhead, never payload (WRITE_AMPLIFICATION.md, issue 29)
_ADDED_PROPERTIES = frozenset({UNIQ_KEY, DELAY, TIMER_DELIVER_MS, "TIMER_DELAY_MS",
                               "TIMER_DELAY_SEC", "REAL_TOPIC", "REAL_QID"})


def producer_payload(message: Message) -> int:
    """What the producer supplied: body + topic + its own properties (tags, keys, user
    properties). Tables measured before issue 29 counted every property (``payload_size``)."""
    own = {k: v for k, v in message.properties.items() if k not in _ADDED_PROPERTIES}
    return (len(message.body) + len(message.topic.encode("utf-8"))
            + (len(encode_properties(own)) if own else 0))


def read_proc_io() -> dict[str, int]:
    """This process's ``/proc/self/io`` counters (all threads, RocksDB's background ones too)."""
    out: dict[str, int] = {}
    with open("/proc/self/io", encoding="ascii") as fh:
        for line in fh:
            name, _, value = line.partition(":")
            out[name.strip()] = int(value)
    return out


def filesystem_type(path: Path) -> str:
    """The type of the filesystem holding ``path`` (longest mount point prefix in /proc/mounts)."""
    path = Path(path).resolve()
    best, fstype = "", "unknown"
    with open("/proc/mounts", encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            mount = parts[1].replace("\\040", " ")
            if (str(path) == mount or str(path).startswith(mount.rstrip("/") + "/")) \
                    and len(mount) >= len(best):
                best, fstype = mount, parts[2]
    return fstype


def disk_usage(path: Path) -> int:
    """Allocated bytes under ``path`` (st_blocks x 512: sparse files count what they use)."""
    total = 0
    stack = [str(path)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        else:
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except FileNotFoundError:
                        pass  # deleted while we looked (retention, compaction)
        except FileNotFoundError:
            pass
    return total


def rocks_settings(profile: str) -> dict[str, Any]:
    """A cell's RocksDB settings from its profile label: ``vlog`` (the vlog layout with the
    default profile), ``vlog:<profile>``, or a profile name for the ``inline`` layout."""
    layout, _, name = profile.partition(":")
    if layout == "vlog":
        return {"rocksdb_layout": "vlog", "rocksdb_profile": name or BrokerConfig().rocksdb_profile}
    return {"rocksdb_layout": "inline", "rocksdb_profile": profile}


def peak_rss_bytes() -> int:
    """This process's peak resident set so far (``ru_maxrss``, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def cell_config(engine: str, workload: str, profile: str = "default") -> BrokerConfig:
    """The broker settings of a cell: defaults, plus a max delay long enough for the workload.
    For ``rocksdb``, ``profile`` also names the layout (see ``rocks_settings``)."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is unknown; valid: {', '.join(ENGINES)}")
    if engine == "levels" and not SPECS[workload].level_shaped:
        raise ValueError(f"workload {workload!r} does not map to delay levels")
    changes: dict[str, Any] = {"timer_engine": "memory" if engine == "levels" else engine}
    if engine == "rocksdb":
        changes.update(rocks_settings(profile))
    need = SPECS[workload].max_delay_sec
    if need and need > BrokerConfig().timer_max_delay_sec:
        changes["timer_max_delay_sec"] = need
    return BrokerConfig(**changes).validate()


def _dues_and_topics(wl: Workload, topics: set[str]):
    for op in wl:
        topics.add(op.topic)
        if not op.cancel:
            yield op.due_ms


class _Dues:
    """The due times still expected: a sorted array, plus the few added back by failed cancels."""

    def __init__(self, sorted_dues: np.ndarray) -> None:
        self.array = sorted_dues
        self.extra: list[int] = []

    def add(self, due_ms: int) -> None:
        bisect.insort(self.extra, due_ms)

    def __len__(self) -> int:
        return len(self.array) + len(self.extra)

    def count_upto(self, ms: int) -> int:
        return int(np.searchsorted(self.array, ms, side="right")) + bisect.bisect_right(
            self.extra, ms)

    def next_after(self, ms: int) -> int | None:
        i = int(np.searchsorted(self.array, ms, side="right"))
        j = bisect.bisect_right(self.extra, ms)
        found = [v for v in ((int(self.array[i]) if i < len(self.array) else None),
                             (self.extra[j] if j < len(self.extra) else None)) if v is not None]
        return min(found) if found else None

    def last(self) -> int:
        values = [0] + self.extra[-1:]
        if len(self.array):
            values.append(int(self.array[-1]))
        return max(values)


class _Cell:
    """The running state of one cell: broker, clock, workload queues and counters."""

    def __init__(self, engine: str, wl: Workload, broker: Broker, clock: ManualClock,
                 keys: bool = False):
        self.engine, self.wl, self.broker, self.clock = engine, wl, broker, clock
        self.keys = keys  # each message carries a business key (the key index's cost)
        # the operations are streamed (a gigabyte cell has millions): one pass for the due
        # times (a sorted numpy array, 8 bytes each) and topics, then a second while sending
        self.count = len(wl)
        topics: set[str] = set()
        dues = np.fromiter(_dues_and_topics(wl, topics), dtype=np.int64)
        dues.sort()
        self.topics = sorted(topics)
        self._ops = iter(wl)
        self._head = next(self._ops, None)
        self.next_send = 0
        self.sent = self.cancelled = self.payload = 0
        # due times (ms after t0) of the messages to deliver, sorted; an unsent message is due
        # after now, so it never counts as late. A cancel that fails adds its due time back.
        self.dues = _Dues(dues)
        self.send_s = self.deliver_s = 0.0
        self.ticks = 0
        self.peak_disk = self.peak_timer_disk = self.peak_live = 0
        engine_dir = {"rocksdb": "timer-rocksdb", "wheel": "wheel"}.get(broker.config.timer_engine)
        self.timer_dir = broker.path / engine_dir if engine_dir else None

    def delivered(self) -> int:
        return sum(self.broker.max_offset(t, 0) for t in self.topics)

    def send_until(self, rel_ms: int) -> None:
        """Send (and cancel) every operation whose send time is <= ``rel_ms``."""
        started = time.perf_counter()
        while self._head is not None and self._head.send_ms <= rel_ms:
            chunk = []
            while self._head is not None and len(chunk) < SEND_CHUNK \
                    and self._head.send_ms <= rel_ms:
                chunk.append(self._head)
                self._head = next(self._ops, None)
            end = self.next_send + len(chunk)
            messages = [self._message(op) for op in chunk]
            results = self.broker.send_batch(messages)
            self.payload += sum(producer_payload(m) for m in messages)
            self.sent += len(chunk)
            for op, result in zip(chunk, results):
                if not op.cancel:
                    continue
                if result.handle is not None and self.broker.cancel(result.handle):
                    self.cancelled += 1
                else:
                    self.dues.add(op.due_ms)
            self.next_send = end
        self.send_s += time.perf_counter() - started

    def _message(self, op) -> Message:
        body = self.wl.body(op)
        if self.engine == "levels":
            props = {DELAY: str(op.level)}
        elif self.wl.delay_divisor > 1:
            # a scaled cell replays the real broker's plan, whose delays are relative to the
            # send (TIMER_DELAY_MS): a delay shorter than the clock's step still goes through
            # the timer, as it does on the real broker
            props = {TIMER_DELAY_MS: str(op.delay_ms)}
        else:
            props = {TIMER_DELIVER_MS: str(T0_MS + op.due_ms)}
        keys = (f"order-{op.msg_id[:12]}",) if self.keys else ()
        return Message(topic=op.topic, body=body, msg_id=op.msg_id, properties=props, keys=keys)

    def tick(self, now_ms: int) -> int:
        started = time.perf_counter()
        delivered = self.broker.tick(now_ms)
        self.deliver_s += time.perf_counter() - started
        self.ticks += 1
        if self.ticks % DU_EVERY_TICKS == 0:
            self.sample_disk()
        return delivered

    def sample_disk(self) -> None:
        self.peak_disk = max(self.peak_disk, disk_usage(self.broker.path))
        if self.timer_dir is not None:
            self.peak_timer_disk = max(self.peak_timer_disk, disk_usage(self.timer_dir))
        if self.sent:
            live = self.sent - self.cancelled - self.delivered()
            self.peak_live = max(self.peak_live, live * self.payload // self.sent)


def _drive(cell: _Cell, workload: str, precision_ms: int) -> bool:
    """Advance simulated time until every sent, not cancelled message is delivered."""
    active_ms, idle_ms = STEPS_MS[workload]
    lag_ms = 2 * precision_ms
    clock, now = cell.clock, T0_MS
    give_up_ms = T0_MS + cell.dues.last() + 86_400_000 if cell.count else T0_MS
    while True:
        rel = now - T0_MS
        was_sending = cell.next_send < cell.count
        cell.send_until(rel)
        if was_sending and cell.next_send == cell.count:
            cell.sample_disk()  # the most messages are pending right after the last send
        expected = cell.dues.count_upto(rel - lag_ms)
        done = cell.delivered()
        for _ in range(MAX_TICKS_SAME_TIME):
            moved = cell.tick(now)
            done = cell.delivered()
            # the wheel's rolls are deliveries into its timer topic that ``delivered`` does not
            # count: it keeps ticking while they move, or a month cell in one store got one
            # deliverer batch of rolls per 600 s step and fell behind CommitLog retention
            if not moved or (done >= expected and cell.engine != "wheel"):
                break
        sending = cell.next_send < cell.count
        if not sending and done >= len(cell.dues):
            return True
        if now > give_up_ms:
            return False
        if sending:
            step = SEND_STEP_MS
        else:
            nxt = cell.dues.next_after(rel - lag_ms)
            wait = nxt + lag_ms - rel if nxt is not None else idle_ms
            step = min(idle_ms, max(active_ms, wait))
        now = clock.set(now + step)


def _settle(broker: Broker) -> None:
    """Flush everything still in memory, then let background compaction finish."""
    timer = broker.timer
    if broker.config.timer_engine == "rocksdb":
        timer.wait_for_maintenance()  # a relocation still copying
        timer.flush()
        timer.wait_for_compactions(quiet_ms=500, timeout_ms=300_000)
    elif broker.config.timer_engine == "wheel":  # memory holds nothing to flush
        timer.flush(broker.clock.now_ms())
    broker.messages.flush()


def _components(stats: dict[str, Any]) -> dict[str, int]:
    cl = stats["commitlog"]
    by_topic = cl.get("bytes_by_topic", {})
    timer_topic = by_topic.get(WHEEL_TIMER_TOPIC, 0)
    level_topic = by_topic.get(SCHEDULE_TOPIC, 0)
    delivery = sum(v for t, v in by_topic.items() if t not in (WHEEL_TIMER_TOPIC, SCHEDULE_TOPIC))
    tb = stats["timer"].get("bytes_written", {})
    out = dict.fromkeys(COMPONENTS, 0)
    out.update(cl_delivery=delivery, cl_timer_topic=timer_topic, cl_level_topic=level_topic,
               cl_other=max(0, cl["commitlog_bytes"] - delivery - timer_topic - level_topic),
               consumequeue=cl["consumequeue_bytes"])
    if stats["engine"] == "rocksdb":
        out.update(rocks_wal=tb.get("wal", 0), rocks_flush=tb.get("flush", 0),
                   rocks_compaction=tb.get("compaction", 0), rocks_vlog=tb.get("vlog", 0),
                   rocks_relocation=tb.get("vlog_relocation", 0))
    elif stats["engine"] == "wheel":
        out.update(wheel_timerlog=tb.get("timerlog", 0), wheel_slots=tb.get("wheel", 0),
                   wheel_checkpoint=tb.get("checkpoint", 0) + tb.get("metrics", 0))
    return out


def run_cell(engine: str, workload: str, messages: int, body_size: int = 1024,
             profile: str = "default", shard: int = 0, shards: int = 1, seed: int = 7,
             workdir: str | Path | None = None, *, keep: bool = False,
             after: Any = None, on_delivered: Any = None, keys: bool = False,
             config_changes: dict[str, Any] | None = None, delay_divisor: int = 1,
             rate_per_s: int | None = None) -> dict[str, Any]:
    """Run one cell and return its row (see ``COLUMNS``). ``on_delivered(broker, row)`` runs
    once everything is delivered, before the final flush and compaction; ``after(broker, row)``
    after them, while the broker is still open (the tuning script times empty scans there).
    ``keys``: every message carries a unique business key (KEYS), so the row shows what the
    key index costs (payload includes the KEYS property).
    ``config_changes`` override the cell's BrokerConfig; ``delay_divisor`` k divides every delay
    (and the simulated steps follow the short workloads') and ``rate_per_s`` sets the send
    pacing: together they run the scaled cell the real broker ran (bench/rocketmq/compare.py)."""
    profile = profile if engine == "rocksdb" else "-"
    config = cell_config(engine, workload, profile if engine == "rocksdb" else "default")
    if config_changes:
        config = dataclasses.replace(config, **config_changes).validate()
    base = Path(workdir) if workdir else DEFAULT_WORKDIR
    base.mkdir(parents=True, exist_ok=True)
    fstype = filesystem_type(base)
    if fstype in MEMORY_FS:
        raise ValueError(f"{base} is on {fstype}; write amplification needs a real disk")
    root = base / f"{engine}-{workload}-{profile}-s{shard}of{shards}-{uuid.uuid4().hex[:8]}"
    wl = Workload(workload, messages, body_size, seed, delay_divisor=delay_divisor,
                  **({"rate_per_s": rate_per_s} if rate_per_s else {})).shard(shard, shards)
    clock = ManualClock(T0_MS)
    io_before = read_proc_io()
    started = time.perf_counter()
    broker = Broker.open(root, config, clock=clock)
    row: dict[str, Any] = {}
    try:
        cell = _Cell(engine, wl, broker, clock, keys)
        row["rss_before_open_bytes"] = peak_rss_bytes()  # the workload's own lists included
        complete = _drive(cell, "short" if delay_divisor > 1 else workload,
                          config.timer_precision_ms)
        cell.sample_disk()
        if on_delivered is not None:
            on_delivered(broker, row)
        _settle(broker)
        cell.sample_disk()
        stats = broker.stats()
        comps = _components(stats)
        timer_outside = sum(comps[c] for c in TIMER_COMPONENTS)
        timer_bytes = comps["cl_timer_topic"] + comps["cl_level_topic"] + timer_outside
        logical = (sum(comps[c] for c in ("cl_delivery", "cl_timer_topic", "cl_level_topic",
                                          "cl_other", "consumequeue")) + timer_outside)
        tb = stats["timer"].get("bytes_written", {})
        delivered = cell.delivered()
        row.update(keys=keys, engine=engine, workload=workload, profile=profile, messages=cell.count,
                   body_size=body_size, shard=shard, shards=shards, seed=seed, sent=cell.sent,
                   cancelled=cell.cancelled, delivered=delivered,
                   complete=bool(complete and delivered == cell.sent - cell.cancelled),
                   payload_bytes=cell.payload, logical_bytes=logical, timer_bytes=timer_bytes,
                   **comps, rocks_user=tb.get("user", 0) if engine == "rocksdb" else 0,
                   wheel_rolls=tb.get("rolls", 0) if engine == "wheel" else 0,
                   rolls=int(stats["timer"].get("rolls", 0) or 0),
                   final_disk_bytes=disk_usage(root), ticks=cell.ticks,
                   sim_ms=clock.now_ms() - T0_MS, send_seconds=round(cell.send_s, 3),
                   deliver_seconds=round(cell.deliver_s, 3), workdir=str(root))
        row["peak_disk_bytes"] = max(cell.peak_disk, row["final_disk_bytes"])
        row["final_timer_disk_bytes"] = disk_usage(cell.timer_dir) if cell.timer_dir else 0
        row["peak_timer_disk_bytes"] = max(cell.peak_timer_disk, row["final_timer_disk_bytes"])
        row["peak_live_payload"] = cell.peak_live
        # the timer store's own disk (RocksDB dir, vlog segments, or wheel files) per live byte
        row["space_amp"] = row["peak_timer_disk_bytes"] / max(1, cell.peak_live)
        row["layout"] = stats["timer"].get("layout", "-")
        if after is not None:
            after(broker, row)
    finally:
        broker.close()
    io_after = read_proc_io()
    seconds = time.perf_counter() - started
    payload = max(1, row["payload_bytes"])
    row.update(physical_bytes=io_after["write_bytes"] - io_before["write_bytes"],
               cancelled_write_bytes=(io_after["cancelled_write_bytes"]
                                      - io_before["cancelled_write_bytes"]),
               seconds=round(seconds, 3), peak_rss_bytes=peak_rss_bytes())
    row.update(wa_physical=row["physical_bytes"] / payload,
               wa_logical=row["logical_bytes"] / payload, wa_timer=row["timer_bytes"] / payload,
               send_per_s=row["sent"] / row["send_seconds"] if row["send_seconds"] else 0.0,
               deliver_per_s=(row["delivered"] / row["deliver_seconds"]
                              if row["deliver_seconds"] else 0.0))
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    return {name: row.get(name) for name in COLUMNS} | {
        k: v for k, v in row.items() if k not in COLUMNS}


__all__ = ["COLUMNS", "COMPONENTS", "DEFAULT_WORKDIR", "ENGINES", "T0_MS", "cell_config",
           "disk_usage", "filesystem_type", "read_proc_io", "run_cell"]
