"""``python -m bench.rocketmq.roll_hour``: the real RocksDB timeline's hourly roll, in real time.

RocketMQ 5.5.1's ``Timeline.TimelineRollService`` waits ``timerRocksDBRollIntervalHours`` (1 h, an
integer >= 1) on a monotonic wait, then re-puts every pending message due more than
``timerRocksDBRollRangeHours`` (2 h) ahead to the timer topic (a full CommitLog copy each) and
re-indexes it. Neither a sped-up clock (libfaketime speeds up the wall clock, not that wait) nor
scaled delays (the interval cannot go below one hour) reproduce it, so this runs it as it is: the
month workload's messages (real delays, 3..30 days) are sent to a fresh broker on the RocksDB
timeline, which then idles until its first roll has run (about an hour after it started); the
JVM's bytes written (``/proc/<pid>/io``) and the CommitLog's size are sampled every 30 s.

The result (bench/results/rocketmq_roll.json) is what one roll costs per pending payload byte;
docs/WRITE_AMPLIFICATION.md turns it into the real-time WA of month delays. The JVM is idle
between the sends and the roll: only the send phase holds ``/work/bench.lock``.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from bench.common import RESULTS, import_client, write_result
from bench.rocketmq.cluster import RocketMQCluster
from bench.rocketmq.driver import GrpcDriver, disk_usage, file_bytes, proc_status, proc_written
from bench.workloads import MONTH_MAX_DELAY_SEC, TOPICS, Workload

_ROLLED = re.compile(r"Timeline scan records from rocksdb, checkpoint: (\d+), records size: (\d+)")


@contextmanager
def bench_lock(path: str | None):
    if not path:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def rolls_in(log: Path) -> list[tuple[int, int]]:
    """(checkpoint, records) of every roll scan store.log reports (the forward scans log the
    same line once a second with a checkpoint near now; a roll's is now + 2 h)."""
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return [(int(a), int(b)) for a, b in _ROLLED.findall(text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rocketmq.roll_hour", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--max-minutes", type=float, default=75.0)
    parser.add_argument("--lock", default="/work/bench.lock",
                        help="file locked during the send phase ('' for none)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="rmq-roll-", dir=args.workdir))
    logs = Path(tempfile.mkdtemp(prefix="rmq-roll-logs-", dir="/dev/shm"))
    mq = import_client(logs)
    wl = Workload("month", args.messages, args.body_size, args.seed)
    cluster = RocketMQCluster(root, engine="rocksdb", log_dir=logs,
                              broker_settings={"timerMaxDelaySec": str(MONTH_MAX_DELAY_SEC)})
    samples = []
    with bench_lock(args.lock):
        cluster.start()
    started = time.monotonic()
    try:
        with bench_lock(args.lock):
            cluster.admin(topics={t: "DELAY" for t in TOPICS}, groups=("roll_group",))
            with GrpcDriver(mq, cluster.grpc_endpoint, TOPICS, "roll_group", consumers=0) as drv:
                now_ms = time.time() * 1000
                sent, send_s, payload = drv.send(
                    (op.topic, wl.body(op), int((now_ms + op.delay_ms) // 1000) + 1) for op in wl)
            time.sleep(20)
        store_log = logs / "logs" / "rocketmqlogs" / "store.log"
        base_written = proc_written(cluster.broker_pid)
        base_cl = disk_usage(cluster.store_dir / "commitlog")
        deadline = started + args.max_minutes * 60
        rolled: list[tuple[int, int]] = []
        while time.monotonic() < deadline:
            time.sleep(30)
            rolls = [r for r in rolls_in(store_log) if r[0] > time.time() * 1000 + 3_600_000]
            samples.append({"minutes": round((time.monotonic() - started) / 60, 2),
                            "written": proc_written(cluster.broker_pid) - base_written,
                            "commitlog": disk_usage(cluster.store_dir / "commitlog") - base_cl,
                            "rolls": len(rolls)})
            print(samples[-1], flush=True)
            if rolls and len(samples) >= 2 and samples[-1]["written"] == samples[-2]["written"]:
                rolled = rolls
                break
            rolled = rolls
        result = {
            "messages": sent, "payload_bytes": payload, "send_seconds": round(send_s, 2),
            "rolls": [{"checkpoint_ms": c, "records": n} for c, n in rolled],
            "written_after_sends": samples[-1]["written"] if samples else 0,
            "commitlog_growth": samples[-1]["commitlog"] if samples else 0,
            "log_bytes": file_bytes(logs), "peak_rss_bytes": proc_status(cluster.broker_pid,
                                                                         "VmHWM"),
            "samples": samples,
        }
        if rolled and payload:
            result["roll_written_per_payload"] = round(result["written_after_sends"] / payload, 3)
            result["roll_commitlog_per_payload"] = round(result["commitlog_growth"] / payload, 3)
    finally:
        cluster.stop()
        shutil.rmtree(logs, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    path = write_result("rocketmq_roll", result, args.results_dir)
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
