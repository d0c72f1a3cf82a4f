"""``python -m bench.rocketmq.compare``: rtimer beside the real Apache RocketMQ, one run, one table.

Engines: ``rtimer`` (the RocksDB engine, its default ``vlog`` layout), ``rocketmq-wheel`` (the
real file wheel, RIP-43), ``rocketmq-rocksdb`` (the real RocksDB timeline, RIP-82) and
``rocketmq-levels`` (the real 18 delay levels, ScheduleMessageService), the real ones from
``bench/rocketmq/cluster.py``; and rtimer's own models of them: ``wheel`` (rtimer's file wheel run
as the real wheel's scaled cell: same k, same roll window, 1 s precision, the real cells' send
pace), ``wheel-full`` (rtimer's wheel at full scale with its defaults, as published before) and
``levels`` (rtimer's levels with the real cell's scaled table). The level engines take only the
``levels`` workload, the wheels and the timeline the others. Cells (docs/BENCHMARKS.md "The real
Apache RocketMQ"):

- **WA cells** (``short``, ``day``, ``month`` of ``bench/workloads.py``: same delays, same
  incompressible bodies, same counts). The real broker runs in real time with every delay
  divided by a scale factor k and the wheel's roll window (``timerRollWindowSlot``) divided by
  the same k, so each message takes the same number of wheel rolls as at full scale; the
  official Python client sends the messages through the proxy and nothing consumes them (as in
  rtimer's harness): a cell ends when every message is in its real topic's ConsumeQueue.
  Bytes = the broker JVM's ``write_bytes`` (``/proc/<pid>/io``) from after start-up to then; its
  logs are on tmpfs and reported apart. rtimer's cell is ``bench.harness.run_cell`` (the same
  workload under a manual clock, in a child process: its whole ``/proc/self/io``).
- **Timing cells** on rtimer, the two real timer engines and rtimer's wheel (``wheel``, behind
  rtimer's fronts at 1 s precision). ``rate`` = messages due at 5,000 per second, through the
  official Python client (rtimer behind ``rtimer run --grpc-listen``, RocketMQ behind its proxy);
  ``burst`` = messages all due in one second, sent and consumed by the Java 4.9.8 client
  (``java/BurstClient.java``: async sends, then a push consumer; rtimer behind ``rtimer run
  --remoting-listen``, RocketMQ through its NameServer), until the last one is read. Lateness is
  measured twice: at the broker (the delivered copy's store timestamp - due) and at the consumer
  (receive time - due); the Python client bounds the rate cell's consumer side, which the table
  states.

Payload = body + topic (the workload sets no user property; WRITE_AMPLIFICATION.md). Run it under
``flock /work/bench.lock``.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import RESULTS, import_client, percentile
from bench.rocketmq.cluster import RocketMQCluster
from bench.rocketmq.driver import (GrpcDriver, RtimerProcess, Sampler, disk_usage, file_bytes,
                                   proc_status, proc_written, store_ms)
from bench.harness import COMPONENTS
from bench.workloads import DAY_MS, MONTH_MAX_DELAY_SEC, TOPICS, Workload
from rocks_timer.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevelTable

# rtimer; the real broker's file wheel, RocksDB timeline and 18 delay levels; rtimer's own models
# of the wheel (``wheel``: run as the real wheel's scaled cell; ``wheel-full``: at full scale with
# rtimer's defaults, as docs/WRITE_AMPLIFICATION.md publishes it) and of the levels (``levels``)
ENGINES = ("rtimer", "rocketmq-wheel", "rocketmq-rocksdb", "rocketmq-levels", "wheel",
           "wheel-full", "levels")
REAL = {"rocketmq-wheel": "wheel", "rocketmq-rocksdb": "rocksdb", "rocketmq-levels": "wheel"}
MODELS = ("wheel", "wheel-full", "levels")
LEVEL_ENGINES = ("rocketmq-levels", "levels")
# the timing cells run a live broker: rtimer (its default engine), the two real timer engines,
# and rtimer's wheel model behind rtimer's own fronts at RocketMQ's 1 s precision
TIMING_ENGINES = ("rtimer", "rocketmq-wheel", "rocketmq-rocksdb", "wheel")
WHEEL_MODEL_CONFIG = {"timer_engine": "wheel", "timer_precision_ms": 1000}
WA_WORKLOADS = ("short", "day", "month", "levels")
# delays divided by k: the longest delay of each workload becomes two minutes (the wheel's roll
# window, 2 days, becomes 8 slots of 1 s for month: still several rolls a message, as at full scale)
SCALE = {"short": 30, "day": 1440, "month": 21600, "levels": 60}
# the real cells' send rate (PlanSender: 10,100-11,600/s in the 200,000-message cells); the scaled
# model cells send at this pace in simulated time so that as many messages share a wheel slot
REAL_SEND_PER_S = 11_000
WHEEL_WINDOW_SLOTS = 2 * DAY_MS // 1000  # timerRollWindowSlot's default at 1 s precision
DUE_PER_S = 5_000
TIMING_TOPIC = "bench_timing"
CQ_ENTRY = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tag", ">i8")])
TIMER_TOPIC = "rmq_sys_wheel_timer"


# -- the store's own files: how many messages a ConsumeQueue holds --------------------------------
def cq_entries(store: Path, topic: str) -> int:
    """Entries in ``topic``'s ConsumeQueue files (20 B each; unwritten, preallocated space is
    zeros, and a written entry's size is > 0)."""
    total = 0
    base = store / "consumequeue" / topic
    if not base.exists():
        return 0
    for path in base.rglob("*"):
        if path.is_file():
            data = np.fromfile(path, dtype=np.uint8)
            usable = len(data) - len(data) % CQ_ENTRY.itemsize
            entries = data[:usable].view(CQ_ENTRY)
            total += int(np.count_nonzero(entries["size"] > 0))
    return total


def real_delivered(store: Path) -> int:
    return sum(cq_entries(store, t) for t in TOPICS)


# -- one lock so two JVM cells never overlap (Spark runs two tasks at once on two cores) ----------
@contextmanager
def jvm_lock(workdir: Path):
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / ".rocketmq-cell.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _logs_dir() -> Path:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    return Path(tempfile.mkdtemp(prefix="rmq-logs-", dir=base))


JAVA_DIR = Path(__file__).resolve().parent / "java"
CLASSES = Path(__file__).resolve().parent / ".classes"


def java_sender_classes() -> Path:
    """PlanSender compiled against the resolved classpath (bench/rocketmq/.classes, gitignored)."""
    from bench.rocketmq.cluster import classpath
    source = JAVA_DIR / "PlanSender.java"
    target = CLASSES / "PlanSender.class"
    if not target.exists() or target.stat().st_mtime < source.stat().st_mtime:
        CLASSES.mkdir(exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-cp", classpath(), "-d", str(CLASSES), str(source)],
                       check=True, capture_output=True, text=True)
    return CLASSES


def write_plan(path: Path, wl: Workload, scale: int) -> tuple[int, int]:
    """The workload as PlanSender's plan (see PlanSender.java); returns (messages, payload)."""
    ops = list(wl)
    topics = sorted({op.topic for op in ops})
    pool: dict[int, int] = {}
    bodies: list[bytes] = []
    records = np.zeros(len(ops), dtype=[("t", "u1"), ("b", ">u2"), ("d", ">i8")])
    payload = 0
    for i, op in enumerate(ops):
        body = wl.body(op)
        index = pool.setdefault(id(body), len(bodies))
        if index == len(bodies):
            bodies.append(body)
        # a delay level travels as a negative delay (PlanSender sets setDelayTimeLevel)
        delay = -op.level if wl.level_shaped else max(1, op.delay_ms // scale)
        records[i] = (topics.index(op.topic), index, delay)
        payload += len(body) + len(op.topic.encode())
    with path.open("wb") as f:
        f.write(struct.pack(">i", len(topics)))
        for t in topics:
            raw = t.encode()
            f.write(struct.pack(">h", len(raw)) + raw)
        f.write(struct.pack(">i", len(bodies)))
        for b in bodies:
            f.write(struct.pack(">i", len(b)) + b)
        f.write(struct.pack(">q", len(ops)))
        f.write(records.tobytes())
    return len(ops), payload


def java_send(cluster: RocketMQCluster, plan: Path, progress=None) -> tuple[int, float]:
    """PlanSender against the NameServer; ``progress(acknowledged)`` as it reports."""
    from bench.rocketmq.cluster import classpath
    cp = os.pathsep.join([str(java_sender_classes()), classpath()])
    proc = subprocess.Popen(["java", "-Xmx512m", "-XX:ActiveProcessorCount=2",
                             f"-Duser.home={cluster.home}", "-cp", cp, "PlanSender",
                             cluster.namesrv_addr, str(plan)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    tail: list[str] = []
    line = None
    for text in proc.stdout:
        if text.startswith("PROGRESS ") and progress is not None:
            progress(int(text.split()[1]))
        elif text.startswith("SENT "):
            line = text
        else:
            tail = (tail + [text])[-40:]
    proc.wait()
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"PlanSender failed ({proc.returncode}):\n{''.join(tail)}")
    _, sent, seconds, busy = line.split()
    java_send.busy = int(busy)  # type: ignore[attr-defined]
    return int(sent), float(seconds)


def wheel_settings(scale: int) -> dict[str, str]:
    return {"timerMaxDelaySec": str(MONTH_MAX_DELAY_SEC),
            "timerRollWindowSlot": str(max(2, WHEEL_WINDOW_SLOTS // scale))}


def scaled_levels(scale: int) -> str:
    """The 18 default level delays divided by ``scale``, in whole seconds (at least 1 s): the
    broker's ``messageDelayLevel`` and the levels model's ``message_delay_level`` alike."""
    delays = DelayLevelTable.parse(DEFAULT_DELAY_LEVELS).delays_ms
    return " ".join(f"{max(1, round(d / scale / 1000))}s" for d in delays)


def applies(engine: str, workload: str) -> bool:
    """The level engines take only the level-shaped workload, which the wheels do not take."""
    return (engine in LEVEL_ENGINES) == (workload == "levels") or engine == "rtimer"


# -- WA cell on the real broker ------------------------------------------------------------------
def real_wa_cell(engine: str, workload: str, messages: int, body_size: int = 1024, seed: int = 7,
                 workdir: str | Path | None = None, scale: int | None = None,
                 faketime_speed: int = 0, keep: bool = False,
                 client: str = "java", deliver_timeout_s: float | None = None) -> dict[str, Any]:
    """One WA cell on the real broker (``engine`` = rocketmq-wheel / rocketmq-rocksdb).

    ``scale``: delays and the wheel's roll window divided by it (default ``SCALE``).
    ``faketime_speed`` > 0 instead runs the broker JVM under libfaketime at that speed with the
    delays and the window unscaled (the validation of the scaled method). ``client``: ``java``
    (PlanSender, relative delays) or ``python`` (the official 5.x client through the proxy).
    ``deliver_timeout_s``: how long after the last send to wait for every delivery (default the
    longest scaled delay + 300 s); a cell that runs out says ``complete`` False and how many
    messages had been delivered."""
    base = Path(workdir or RESULTS / "tmp")
    k = 1 if faketime_speed else (scale or SCALE[workload])
    wl = Workload(workload, messages, body_size, seed)
    root = base / f"{engine}-{workload}-{uuid.uuid4().hex[:8]}"
    logs = _logs_dir()
    mq = import_client(logs)
    settings = wheel_settings(k)
    if engine == "rocketmq-levels":
        settings["messageDelayLevel"] = scaled_levels(k)
    cluster = RocketMQCluster(root, engine=REAL[engine], log_dir=logs, broker_settings=settings,
                              faketime=f"+0 x{faketime_speed}" if faketime_speed else None,
                              start_timeout_s=600 if faketime_speed else 120)
    row: dict[str, Any] = {"engine": engine, "workload": workload, "messages": messages,
                           "body_size": body_size, "seed": seed, "scale": k,
                           "faketime_speed": faketime_speed,
                           "layout": "levels" if engine == "rocketmq-levels" else REAL[engine],
                           "client": client}
    with jvm_lock(base):
        started = time.perf_counter()
        cluster.start()
        try:
            cluster.admin(topics={t: "DELAY" for t in TOPICS}, groups=("bench_wa",))
            time.sleep(2)
            pid = cluster.broker_pid
            written0, logs0 = proc_written(pid), file_bytes(logs)
            clock = _BrokerClock(faketime_speed)
            with GrpcDriver(mq, cluster.grpc_endpoint, TOPICS, "bench_wa", consumers=0) as drv:
                clock.calibrate(drv, cluster)
                with Sampler(cluster.store_dir) as sampler:
                    # live payload: sent (acknowledged) and not yet in its real topic
                    state = {"sent": 0, "per_message": body_size + 8.0}
                    sampler.live = lambda: int(max(0, state["sent"] - real_delivered(
                        cluster.store_dir)) * state["per_message"])
                    if client == "java":
                        plan = root / "plan.bin"
                        planned, payload = write_plan(plan, wl, k)
                        state.update(per_message=payload / max(1, planned), sent=0)
                        sent, send_s = java_send(
                            cluster, plan, lambda n: state.update(sent=n))
                        row["busy_retried"] = getattr(java_send, "busy", 0)
                    else:
                        items = ((op.topic, wl.body(op), math.ceil(
                            (clock.now_ms() + op.delay_ms / k) / 1000)) for op in wl)
                        sent, send_s, payload = drv.send(items)
                    state.update(sent=sent, per_message=payload / max(1, sent))
                    deliver_start = time.perf_counter()
                    longest_ms = max(op.delay_ms for op in wl) / k
                    wait_s = (deliver_timeout_s if deliver_timeout_s is not None else
                              longest_ms / 1000 / max(1, faketime_speed) + 300)
                    deadline = time.monotonic() + wait_s
                    delivered = 0
                    while time.monotonic() < deadline:
                        delivered = real_delivered(cluster.store_dir)
                        if delivered >= sent:
                            break
                        time.sleep(1.0)
                    deliver_s = time.perf_counter() - deliver_start
                    time.sleep(3)  # the CommitLog flushes every 500 ms, the timer files every 1 s
            written = proc_written(pid) - written0
            store = cluster.store_dir
            timer_entries = cq_entries(store, TIMER_TOPIC)
            row.update(
                sent=sent, delivered=delivered, complete=delivered >= sent,
                payload_bytes=payload, physical_bytes=written,
                wa_physical=written / max(1, payload),
                log_bytes=file_bytes(logs) - logs0,
                timer_topic_entries=timer_entries, rolls=max(0, timer_entries - sent),
                commitlog_bytes=disk_usage(store / "commitlog"),
                consumequeue_bytes=disk_usage(store / "consumequeue"),
                timerlog_bytes=disk_usage(store / "timerlog"),
                rocksdb_bytes=disk_usage(store / "rocksdbstore"),
                peak_disk_bytes=sampler.peak_disk, final_disk_bytes=disk_usage(store),
                peak_live_payload=sampler.peak_live,
                send_seconds=round(send_s, 3), send_per_s=sent / max(send_s, 1e-9),
                deliver_seconds=round(deliver_s, 3), peak_rss_bytes=proc_status(pid, "VmHWM"),
                seconds=round(time.perf_counter() - started, 1), workdir=str(root))
        finally:
            cluster.stop()
            shutil.rmtree(logs, ignore_errors=True)
            if not keep:
                shutil.rmtree(root, ignore_errors=True)
    return row


class _BrokerClock:
    """The broker's wall clock as seen from here: ours, or, under libfaketime, ours sped up
    from a calibration message (its store timestamp)."""

    def __init__(self, speed: int):
        self.speed = speed
        self.real0 = self.virt0 = 0.0

    def calibrate(self, drv: GrpcDriver, cluster: RocketMQCluster) -> None:
        if not self.speed:
            return
        cluster.admin(topics={"bench_calib": "NORMAL"}, groups=("bench_calib",))
        mq = drv.mq
        consumer = mq.SimpleConsumer(drv.config, "bench_calib",
                                     {"bench_calib": mq.FilterExpression()}, await_duration=2)
        producer = mq.Producer(drv.config, ("bench_calib",))
        producer.startup()
        consumer.startup()
        try:
            msg = mq.Message()
            msg.topic, msg.body = "bench_calib", b"calibration"
            before = time.time() * 1000
            producer.send(msg)
            after = time.time() * 1000
            got = []
            while not got:
                got = consumer.receive(1, 30)
            consumer.ack(got[0])
            self.real0, self.virt0 = (before + after) / 2, float(store_ms(got[0]))
        finally:
            consumer.shutdown()
            producer.shutdown()

    def now_ms(self) -> float:
        real = time.time() * 1000
        if not self.speed:
            return real
        return self.virt0 + (real - self.real0) * self.speed


# -- WA cells on rtimer and on rtimer's models (bench.harness, manual clock) -----------------------
def model_settings(engine: str, workload: str) -> dict[str, Any]:
    """``run_cell`` keywords of a model engine. ``wheel``: the real wheel's scaled cell (delays
    and roll window divided by k, 1 s precision as RocketMQ's default, sent at the real cells'
    pace); ``wheel-full``: full scale, rtimer's defaults; ``levels``: the real levels' scaled
    table, sent at the real cells' pace."""
    k = SCALE[workload]
    if engine == "wheel":
        return {"config_changes": {"timer_precision_ms": 1000,
                                   "timer_roll_window_slots": max(2, WHEEL_WINDOW_SLOTS // k)},
                "delay_divisor": k, "rate_per_s": REAL_SEND_PER_S, "scale": k}
    if engine == "levels":
        return {"config_changes": {"message_delay_level": scaled_levels(k)},
                "delay_divisor": k, "rate_per_s": REAL_SEND_PER_S, "scale": k}
    return {"scale": 1}


def rtimer_wa_cell(workload: str, messages: int, body_size: int = 1024, seed: int = 7,
                   workdir: str | Path | None = None, profile: str = "vlog",
                   engine: str = "rtimer") -> dict[str, Any]:
    """``bench.harness.run_cell`` (engine rocksdb with ``profile``, or a model engine of
    ``MODELS``) in a child process; payload recomputed as body + topic (the harness counts the
    TIMER_DELIVER_MS / DELAY property too)."""
    harness_engine = {"rtimer": "rocksdb", "wheel": "wheel", "wheel-full": "wheel",
                      "levels": "levels"}[engine]
    settings = model_settings(engine, workload) if engine in MODELS else {"scale": 1}
    k = settings.pop("scale")
    code = ("import json,sys; from bench.harness import run_cell; "
            f"kw = json.loads(sys.argv[1]); "
            f"r = run_cell({harness_engine!r}, {workload!r}, {messages}, {body_size}, "
            f"profile={profile!r}, seed={seed}, workdir={str(workdir or RESULTS / 'tmp')!r}, "
            "**kw); print('ROW ' + json.dumps(r, default=str))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(settings)], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[2], check=True)
    row = json.loads(next(l for l in out.stdout.splitlines() if l.startswith("ROW "))[4:])
    wl = Workload(workload, messages, body_size, seed)
    payload = sum(body_size + len(op.topic.encode()) for op in wl)
    layout = row.get("layout", profile) if engine == "rtimer" else (
        f"rtimer's {harness_engine} model" + (", scaled as the real cell" if k > 1 else
                                              ", full scale"))
    return {"engine": engine, "workload": workload, "messages": messages,
            "body_size": body_size, "seed": seed, "scale": k, "faketime_speed": 0,
            "layout": layout, "settings": settings, "sent": row["sent"],
            "delivered": row["delivered"], "complete": row["complete"],
            "payload_bytes": payload, "physical_bytes": row["physical_bytes"],
            "wa_physical": row["physical_bytes"] / payload, "log_bytes": 0,
            "rolls": row.get("rolls", 0), "peak_disk_bytes": row["peak_disk_bytes"],
            "final_disk_bytes": row["final_disk_bytes"],
            "peak_live_payload": row["peak_live_payload"],
            "send_per_s": row["send_per_s"], "deliver_seconds": row["deliver_seconds"],
            "peak_rss_bytes": row["peak_rss_bytes"], "seconds": row["seconds"],
            "harness_payload_bytes": row["payload_bytes"],
            "components": {c: row.get(c, 0) for c in COMPONENTS}}


# -- timing cells through the gRPC front, every engine -----------------------------------------------
@contextmanager
def engine_endpoint(engine: str, root: Path):
    """(endpoint, pid, store dir, log dir) of a fresh engine with the timing topic and group."""
    logs = _logs_dir()
    try:
        if engine in ("rtimer", "wheel"):
            proc = RtimerProcess(root / "data", logs, config_lines=(
                WHEEL_MODEL_CONFIG if engine == "wheel" else {})).start()
            try:
                yield proc.endpoint, proc.pid, root / "data", logs
            finally:
                proc.stop()
        else:
            with RocketMQCluster(root, engine=REAL[engine], log_dir=logs,
                                 broker_settings=wheel_settings(1)) as cluster:
                cluster.admin(topics={TIMING_TOPIC: "DELAY"}, groups=("bench_timing",))
                yield cluster.grpc_endpoint, cluster.broker_pid, cluster.store_dir, logs
    finally:
        shutil.rmtree(logs, ignore_errors=True)


def timing_cell(engine: str, kind: str, count: int, body_size: int = 1024, seed: int = 7,
                workdir: str | Path | None = None, consumers: int = 4,
                send_floor_per_s: float = 700.0) -> dict[str, Any]:
    """``kind`` = ``rate`` (due at 5,000/s) or ``burst`` (all due in one second)."""
    base = Path(workdir or RESULTS / "tmp")
    root = base / f"timing-{engine}-{kind}-{uuid.uuid4().hex[:8]}"
    wl = Workload("burst", count, body_size, seed)
    home = _logs_dir()
    mq = import_client(home)
    row: dict[str, Any] = {"engine": engine, "cell": kind, "messages": count,
                           "body_size": body_size}
    with jvm_lock(base), engine_endpoint(engine, root) as (endpoint, pid, store, logs):
        time.sleep(1)
        written0, logs0 = proc_written(pid), file_bytes(logs)
        with GrpcDriver(mq, endpoint, (TIMING_TOPIC,), "bench_timing", consumers) as drv:
            t0_s = math.ceil(time.time() + count / send_floor_per_s + 5)

            def due(i: int) -> int:
                return t0_s + (i // DUE_PER_S if kind == "rate" else 0)

            sent, send_s, payload = drv.send(
                (TIMING_TOPIC, wl.body(op), due(op.index)) for op in wl)
            sent_done_s = time.time()
            got = drv.consume(sent, deadline_s=max(0, t0_s - time.time()) + 1800)
        written = proc_written(pid) - written0
        row.update(sent=sent, send_per_s=round(sent / send_s, 1), payload_bytes=payload,
                   sends_after_due=int(sent_done_s > t0_s), received=len(got),
                   physical_bytes=written, log_bytes=file_bytes(logs) - logs0,
                   peak_rss_bytes=proc_status(pid, "VmHWM"))
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    row.update(_lateness(got, t0_s))
    return row


def _lateness(got, t0_s: int) -> dict[str, Any]:
    if not got:
        return {}
    broker = [r.store_ms - r.due_ms for r in got]
    consumer = [r.receive_ms - r.due_ms for r in got]
    t0_ms = t0_s * 1000
    last_store = max(r.store_ms for r in got)
    last_receive = max(r.receive_ms for r in got)
    span_store = max(1.0, last_store - max(t0_ms, min(r.store_ms for r in got))) / 1000
    span_recv = max(1.0, last_receive - max(t0_ms, min(r.receive_ms for r in got))) / 1000
    return {
        "broker_p50_ms": round(percentile(broker, 50), 1),
        "broker_p99_ms": round(percentile(broker, 99), 1),
        "broker_max_ms": round(max(broker), 1), "broker_early": sum(1 for v in broker if v < 0),
        "consumer_p50_ms": round(percentile(consumer, 50), 1),
        "consumer_p99_ms": round(percentile(consumer, 99), 1),
        "consumer_max_ms": round(max(consumer), 1),
        "consumer_early": sum(1 for v in consumer if v < 0),
        "deliver_per_s": round(len(got) / span_store, 1),
        "consume_per_s": round(len(got) / span_recv, 1),
        "delivered_all_after_s": round((last_store - t0_ms) / 1000, 2),
        "consumed_all_after_s": round((last_receive - t0_ms) / 1000, 2),
    }


# -- the burst cell: the same Java 4.9.8 client sends and consumes on every engine ----------------
JAVA4_DIR = Path(__file__).resolve().parents[2] / "tests" / "fronts" / "java"
CLASSES4 = Path(__file__).resolve().parent / ".classes4"


def java4_classpath() -> str:
    """BurstClient compiled against the 4.9.8 client's classpath (``make java-remoting-client``
    writes it to tests/fronts/java/target/classpath.txt) into bench/rocketmq/.classes4."""
    cp_file = JAVA4_DIR / "target" / "classpath.txt"
    if not cp_file.exists():
        raise RuntimeError(f"{cp_file} is missing: run `make java-remoting-client`")
    cp = cp_file.read_text().strip()
    source = JAVA_DIR / "BurstClient.java"
    target = CLASSES4 / "BurstClient.class"
    if not target.exists() or target.stat().st_mtime < source.stat().st_mtime:
        CLASSES4.mkdir(exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-cp", cp, "-d", str(CLASSES4), str(source)],
                       check=True, capture_output=True, text=True)
    return os.pathsep.join([str(CLASSES4), cp])


@contextmanager
def remoting_endpoint(engine: str, root: Path, heap_mb: int):
    """(NameServer address, pid, log dir) of a fresh engine with the burst topic: rtimer behind
    its remoting front (its port is its own NameServer), or the real broker's NameServer."""
    logs = _logs_dir()
    try:
        if engine in ("rtimer", "wheel"):
            proc = RtimerProcess(root / "data", logs, front="remoting", config_lines=(
                WHEEL_MODEL_CONFIG if engine == "wheel" else {})).start()
            try:
                yield proc.endpoint, proc.pid, logs
            finally:
                proc.stop()
        else:
            with RocketMQCluster(root, engine=REAL[engine], log_dir=logs, heap_mb=heap_mb,
                                 broker_settings=wheel_settings(1)) as cluster:
                cluster.admin(topics={BURST_TOPIC: "DELAY"}, groups=(BURST_GROUP,))
                yield cluster.namesrv_addr, cluster.broker_pid, logs
    finally:
        shutil.rmtree(logs, ignore_errors=True)


BURST_TOPIC = "bench_burst"
BURST_GROUP = "bench_burst"


def burst_cell(engine: str, count: int, body_size: int = 1024, seed: int = 7,
               workdir: str | Path | None = None, send_floor_per_s: float = 5_000.0,
               timeout_s: int = 900, heap_mb: int = 1024) -> dict[str, Any]:
    """``count`` messages all due in the same second, sent and consumed by the Java 4.9.8 client
    (``BurstClient.java``: async sends, then a push consumer from the first offset). The due
    second is placed after the sends at ``send_floor_per_s``; ``consumed_all_after_s`` = the
    last message's receive time - the due second."""
    base = Path(workdir or RESULTS / "tmp")
    root = base / f"burst-{engine}-{uuid.uuid4().hex[:8]}"
    row: dict[str, Any] = {"engine": engine, "cell": "burst", "messages": count,
                           "body_size": body_size, "client": "java rocketmq-client 4.9.8",
                           "heap_mb": heap_mb if engine in REAL else None}
    cp = java4_classpath()
    with jvm_lock(base), remoting_endpoint(engine, root, heap_mb) as (namesrv, pid, logs):
        time.sleep(1)
        written0, logs0 = proc_written(pid), file_bytes(logs)
        due_ms = math.ceil(time.time() + count / send_floor_per_s + 15) * 1000
        out = root / "burst.bin"
        done = subprocess.run(
            ["java", "-Xmx1g", "-XX:ActiveProcessorCount=2",
             f"-Drocketmq.client.logRoot={logs / 'client'}", "-cp", cp, "BurstClient",
             namesrv, BURST_TOPIC, BURST_GROUP, str(count), str(body_size), str(seed),
             str(due_ms), "128", str(timeout_s), str(out)],
            capture_output=True, text=True, timeout=timeout_s + count / 500 + 600)
        sent_line = next((l for l in done.stdout.splitlines() if l.startswith("SENT ")), None)
        done_line = next((l for l in done.stdout.splitlines() if l.startswith("DONE ")), None)
        if done.returncode != 0 or sent_line is None or done_line is None:
            raise RuntimeError(f"BurstClient failed ({done.returncode}):\n{done.stdout[-3000:]}"
                               f"\n{done.stderr[-3000:]}")
        written = proc_written(pid) - written0
        rss = proc_status(pid, "VmHWM")
        _, sent, send_s, busy, last_ack_ms = sent_line.split()
        _, received, duplicates = done_line.split()
        pairs = np.fromfile(out, dtype=">i8").reshape(-1, 2)
        row.update(sent=int(sent), send_per_s=round(int(sent) / float(send_s), 1),
                   busy_retried=int(busy), sends_after_due=int(int(last_ack_ms) > due_ms),
                   received=int(received), duplicates=int(duplicates),
                   complete=int(received) >= count, physical_bytes=written,
                   payload_bytes=count * (body_size + len(BURST_TOPIC)),
                   log_bytes=file_bytes(logs) - logs0, peak_rss_bytes=rss)
    shutil.rmtree(root, ignore_errors=True)
    got = pairs[:, 0] > 0
    row.update(_lateness_arrays(pairs[got, 0], pairs[got, 1], due_ms))
    return row


def _nearest_rank(ordered: np.ndarray, q: float) -> float:
    return float(ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * (len(ordered) - 1)))))])


def _lateness_arrays(receive_ms: np.ndarray, store_ms: np.ndarray, due_ms: int) -> dict[str, Any]:
    """``_lateness`` for arrays (one due time for all), with the same percentile rule."""
    if not len(receive_ms):
        return {}
    broker = np.sort(store_ms - due_ms)
    consumer = np.sort(receive_ms - due_ms)
    span_store = max(1.0, store_ms.max() - max(due_ms, store_ms.min())) / 1000
    span_recv = max(1.0, receive_ms.max() - max(due_ms, receive_ms.min())) / 1000
    return {
        "broker_p50_ms": round(_nearest_rank(broker, 50), 1),
        "broker_p99_ms": round(_nearest_rank(broker, 99), 1),
        "broker_max_ms": round(float(broker[-1]), 1), "broker_early": int((broker < 0).sum()),
        "consumer_p50_ms": round(_nearest_rank(consumer, 50), 1),
        "consumer_p99_ms": round(_nearest_rank(consumer, 99), 1),
        "consumer_max_ms": round(float(consumer[-1]), 1),
        "consumer_early": int((consumer < 0).sum()),
        "deliver_per_s": round(len(receive_ms) / span_store, 1),
        "consume_per_s": round(len(receive_ms) / span_recv, 1),
        "delivered_all_after_s": round(float(store_ms.max() - due_ms) / 1000, 2),
        "consumed_all_after_s": round(float(receive_ms.max() - due_ms) / 1000, 2),
    }


# -- the table --------------------------------------------------------------------------------------
def _mib(v: float) -> str:
    return f"{v / 2**20:,.1f}"


def wa_table(rows: list[dict]) -> str:
    head = ("| workload | engine | messages | scale k | payload MiB | written MiB | WA (whole "
            "process) | logs MiB (apart) | rolls | peak disk / live payload | send/s | "
            "peak RSS MiB | complete |")
    lines = [head, "|" + "---|" * 13]
    for r in sorted(rows, key=lambda r: (WA_WORKLOADS.index(r["workload"]), r["engine"])):
        live = max(1, r.get("peak_live_payload", 0))
        lines.append(
            f"| {r['workload']} | {r['engine']} ({r.get('layout', '-')}) | {r['messages']:,} | "
            f"{r.get('scale', 1)}{' (faketime x%d)' % r['faketime_speed'] if r.get('faketime_speed') else ''} | "
            f"{_mib(r['payload_bytes'])} | {_mib(r['physical_bytes'])} | "
            f"{r['wa_physical']:.2f} | {_mib(r.get('log_bytes', 0))} | {r.get('rolls', 0):,} | "
            f"{r['peak_disk_bytes'] / live:.2f} | {r['send_per_s']:,.0f} | "
            f"{_mib(r['peak_rss_bytes'])} | {r['complete']} |")
    return "\n".join(lines)


def timing_table(rows: list[dict]) -> str:
    head = ("| cell | engine | messages | send/s | delivered/s (broker) | consumed/s | lateness "
            "at the broker p50 / p99 / max ms | early (broker) | lateness at the consumer p50 "
            "/ p99 / max ms | early (consumer) | all delivered after s | all consumed after s | "
            "WA | peak RSS MiB |")
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        if "broker_p50_ms" not in r:
            lines.append(f"| {r['cell']} | {r['engine']} | {r['messages']:,} | nothing received |"
                         + " |" * 10)
            continue
        lines.append(
            f"| {r['cell']} | {r['engine']} | {r['messages']:,} | {r['send_per_s']:,.0f} | "
            f"{r['deliver_per_s']:,.0f} | {r['consume_per_s']:,.0f} | {r['broker_p50_ms']:,.0f} / "
            f"{r['broker_p99_ms']:,.0f} / {r['broker_max_ms']:,.0f} | {r['broker_early']:,} | "
            f"{r['consumer_p50_ms']:,.0f} / {r['consumer_p99_ms']:,.0f} / "
            f"{r['consumer_max_ms']:,.0f} | {r['consumer_early']:,} | "
            f"{r['delivered_all_after_s']} | {r['consumed_all_after_s']} | "
            f"{r['physical_bytes'] / max(1, r['payload_bytes']):.2f} | "
            f"{_mib(r['peak_rss_bytes'])} |")
    return "\n".join(lines)


def _parts(r: dict) -> tuple[int, int, int]:
    """(CommitLog, ConsumeQueue, timer files) bytes of a row: the real broker's directory sizes
    at the end of the cell, or the model's own counters (the same files, counted as written)."""
    if r["engine"] in REAL:
        return (r.get("commitlog_bytes", 0), r.get("consumequeue_bytes", 0),
                r.get("timerlog_bytes", 0) + r.get("rocksdb_bytes", 0))
    c = r.get("components", {})
    commitlog = sum(c.get(k, 0) for k in ("cl_delivery", "cl_timer_topic", "cl_level_topic",
                                          "cl_other"))
    timer = sum(c.get(k, 0) for k in ("wheel_timerlog", "wheel_slots", "wheel_checkpoint"))
    return commitlog, c.get("consumequeue", 0), timer


def models_table(rows: list[dict]) -> str:
    """rtimer's wheel and levels models beside the real engine they model, per workload: the
    latest row of each (engine, workload, messages)."""
    latest: dict[tuple, dict] = {}
    for r in rows:
        if r["engine"] in ("rocketmq-wheel", "rocketmq-levels", *MODELS):
            latest[(r["workload"], r["engine"], r["messages"])] = r
    head = ("| workload | engine | messages | scale k | WA (whole process) | rolls / message | "
            "CommitLog B / message | ConsumeQueue B / message | timer files B / message | "
            "written / (CommitLog + CQ + timer) | peak disk / live payload | run |")
    lines = [head, "|" + "---|" * 12]
    order = {"rocketmq-wheel": 0, "wheel": 1, "wheel-full": 2, "rocketmq-levels": 3, "levels": 4}
    for (workload, engine, n), r in sorted(latest.items(), key=lambda kv: (
            WA_WORKLOADS.index(kv[0][0]), kv[0][2], order[kv[0][1]])):
        cl, cq, timer = _parts(r)
        files = max(1, cl + cq + timer)
        live = max(1, r.get("peak_live_payload", 0))
        lines.append(
            f"| {workload} | {engine} ({r.get('layout', '-')}) | {n:,} | {r.get('scale', 1)} | "
            f"{r['wa_physical']:.2f} | {r.get('rolls', 0) / max(1, r['sent']):.2f} | "
            f"{cl / max(1, r['sent']):,.0f} | {cq / max(1, r['sent']):,.0f} | "
            f"{timer / max(1, r['sent']):,.0f} | {r['physical_bytes'] / files:.2f} | "
            f"{r['peak_disk_bytes'] / live:.2f} | {r.get('run_started', '-')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rocketmq.compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--workloads", default=",".join(WA_WORKLOADS),
                        help="WA cells ('' for none)")
    parser.add_argument("--messages", type=int, default=200_000, help="messages per WA cell")
    parser.add_argument("--rate-messages", type=int, default=50_000,
                        help="messages of the 5,000 due/s cell (0: skip)")
    parser.add_argument("--burst", type=int, default=1_000_000,
                        help="messages due in one second, sent and consumed by the Java 4.9.8 "
                             "client on every engine (0: skip)")
    parser.add_argument("--burst-send-floor", type=float, default=1_500.0,
                        help="the burst's due second is placed count / this + 15 s after the "
                             "first send (a row says sends_after_due=1 if the sends were slower)")
    parser.add_argument("--burst-heap-mb", type=int, default=1024,
                        help="the real broker's JVM heap in the burst cell")
    parser.add_argument("--wa-timeout-s", type=float, default=None,
                        help="a real WA cell waits this long after its last send for every "
                             "delivery (default: its longest scaled delay + 300 s)")
    parser.add_argument("--validate", default="",
                        help="ENGINE:WORKLOAD:SPEED: also run that WA cell twice at "
                             "--validate-messages, scaled and under libfaketime at that speed "
                             "with the delays unscaled (the scaled method's check)")
    parser.add_argument("--validate-messages", type=int, default=20_000)
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=RESULTS / "tmp")
    parser.add_argument("--out", type=Path, default=RESULTS / "rocketmq")
    parser.add_argument("--summary-only", action="store_true",
                        help="only rewrite summary.md from every row in --out/rows.jsonl")
    args = parser.parse_args(argv)
    if args.summary_only:
        rows = [json.loads(l) for l in (args.out / "rows.jsonl").read_text().splitlines() if l]
        text = ("# rtimer beside the real Apache RocketMQ\n\nRuns: "
                + ", ".join(sorted({r["run_started"] for r in rows})) + "\n\n"
                "## Write amplification\n\n" + wa_table([r for r in rows if r["kind"] == "wa"])
                + "\n\n## Delivery timing (official Python client)\n\n"
                + timing_table([r for r in rows if r["kind"] == "timing"])
                + "\n\n## Burst due in one second (Java 4.9.8 client, consumed)\n\n"
                + timing_table([r for r in rows if r["kind"] == "burst"])
                + "\n\n## rtimer's models beside the real engines\n\n"
                + models_table([r for r in rows if r["kind"] == "wa"]) + "\n")
        (args.out / "summary.md").write_text(text)
        print(text)
        return 0
    engines = [e for e in args.engines.split(",") if e]
    bad = [e for e in engines if e not in ENGINES]
    if bad:
        parser.error(f"unknown engine(s) {bad}; valid: {', '.join(ENGINES)}")
    args.out.mkdir(parents=True, exist_ok=True)
    rows_path = args.out / "rows.jsonl"
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def record(row: dict) -> dict:
        row["run_started"] = started
        with rows_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
        return row

    wa_rows, timing_rows = [], []
    for workload in [w for w in args.workloads.split(",") if w]:
        for engine in [e for e in engines if applies(e, workload)]:
            if engine == "rtimer" or engine in MODELS:
                row = rtimer_wa_cell(workload, args.messages, args.body_size, args.seed,
                                     args.workdir, engine=engine)
            else:
                row = real_wa_cell(engine, workload, args.messages, args.body_size, args.seed,
                                   args.workdir, deliver_timeout_s=args.wa_timeout_s)
            wa_rows.append(record(dict(row, kind="wa")))
    if args.validate:
        engine, workload, speed = args.validate.split(":")
        for fake in (0, int(speed)):
            row = real_wa_cell(engine, workload, args.validate_messages, args.body_size,
                               args.seed, args.workdir, faketime_speed=fake)
            wa_rows.append(record(dict(row, kind="validate")))
    timing_engines = [e for e in engines if e in TIMING_ENGINES]
    if args.rate_messages > 0:
        for engine in timing_engines:
            timing_rows.append(record(dict(timing_cell(engine, "rate", args.rate_messages,
                                                       args.body_size, args.seed, args.workdir),
                                           kind="timing")))
    burst_rows = []
    if args.burst > 0:
        for engine in timing_engines:
            burst_rows.append(record(dict(burst_cell(
                engine, args.burst, args.body_size, args.seed, args.workdir,
                send_floor_per_s=args.burst_send_floor, heap_mb=args.burst_heap_mb),
                kind="burst")))
    text = (f"# rtimer beside the real Apache RocketMQ ({started})\n\n"
            f"Command: `python -m bench.rocketmq.compare {' '.join(argv or sys.argv[1:])}`\n\n"
            "## Write amplification\n\n" + wa_table(wa_rows) +
            "\n\n## Delivery timing (official Python client)\n\n" + timing_table(timing_rows) +
            "\n\n## Burst due in one second (Java 4.9.8 client, consumed)\n\n"
            + timing_table(burst_rows)
            + "\n\n## rtimer's models beside the real engines\n\n" + models_table(wa_rows)
            + "\n")
    (args.out / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


# -- the Spark WA job's cell (spark/wa_compare.py, engines rocketmq-wheel / rocketmq-rocksdb) -------
def spark_cell(engine: str, workload: str, messages: int, body_size: int = 1024,
               profile: str = "-", shard: int = 0, shards: int = 1, seed: int = 7,
               workdir: str | Path | None = None) -> dict[str, Any]:
    """``real_wa_cell`` as a row of ``bench.harness.COLUMNS``: the CommitLog, ConsumeQueue,
    TimerLog and RocksDB directories' final sizes stand in for the logical components (the real
    broker counts none itself); a shard runs the whole workload only with ``shards`` = 1."""
    if shards != 1:
        raise ValueError("the real broker's cells run one shard (--partitions 1)")
    r = real_wa_cell(engine, workload, messages, body_size, seed, workdir)
    logical = r["commitlog_bytes"] + r["consumequeue_bytes"] + r["timerlog_bytes"]
    return {"engine": engine, "workload": workload, "profile": "-", "messages": messages,
            "body_size": body_size, "shard": shard, "shards": shards, "seed": seed,
            "sent": r["sent"], "cancelled": 0, "delivered": r["delivered"],
            "complete": r["complete"], "payload_bytes": r["payload_bytes"],
            "physical_bytes": r["physical_bytes"], "logical_bytes": logical,
            "timer_bytes": r["timerlog_bytes"] + (r["rocksdb_bytes"] if engine ==
                                                   "rocketmq-rocksdb" else 0),
            "cl_other": r["commitlog_bytes"], "consumequeue": r["consumequeue_bytes"],
            "wheel_timerlog": r["timerlog_bytes"], "rolls": r["rolls"],
            "wheel_rolls": r["rolls"] if engine == "rocketmq-wheel" else 0,
            "wa_physical": r["wa_physical"], "wa_logical": logical / max(1, r["payload_bytes"]),
            "peak_disk_bytes": r["peak_disk_bytes"], "final_disk_bytes": r["final_disk_bytes"],
            "peak_live_payload": r["peak_live_payload"], "seconds": r["seconds"],
            "send_seconds": r["send_seconds"], "deliver_seconds": r["deliver_seconds"],
            "send_per_s": r["send_per_s"],
            "deliver_per_s": r["delivered"] / max(1e-9, r["deliver_seconds"]),
            "peak_rss_bytes": r["peak_rss_bytes"], "layout": r["layout"],
            "workdir": r["workdir"], "keys": False}
