"""``python -m bench.remoting``: the remoting front against the real Apache RocketMQ broker, with
the same unmodified Java 4.9.8 client, in one run.

Both sides run ``rtimer.RemotingClient bench`` (tests/fronts/java, built by ``make
java-remoting-client``): ``--messages`` synchronous sends of ``--body`` bytes, one call at a time
(per-call send/s, after 100 warm-up sends to another topic), then a push consumer of a new group
consumes them from the first offset (consume/s from the consumer's start to the last message).
The rtimer side is ``rtimer run --remoting-listen 127.0.0.1:0`` in a subprocess (its NameServer
and broker on one port); the RocketMQ side is ``bench.rocketmq.cluster`` (NameServer + broker,
issue 29's harness, ``make rocketmq``), reached through its NameServer. When that harness or its
jars are missing, the RocketMQ side is reported as not measured, with the reason.

CPU per message: the client stops at each phase boundary (``stepped``) while the user + system
time of the broker process (rtimer's ``rtimer run``; RocketMQ's broker JVM, and its NameServer
JVM apart) and of the client JVM is read from ``/proc/<pid>/stat``; the phase's difference is
divided by its messages. ``bench.fronts`` runs this beside the gRPC comparison.

Run it under ``flock /work/bench.lock``; results go to bench/results/remoting.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from bench.common import RESULTS, ProcessCpu, scratch_dir, write_result

ROOT = Path(__file__).resolve().parent.parent
JAVA_DIR = ROOT / "tests" / "fronts" / "java"
_LISTENING = re.compile(r"remoting .* listening on 127\.0\.0\.1:(\d+)")
JAVA_TIMEOUT_S = 1800


def java_bench(namesrv: str, topic: str, messages: int, body: int, log_root: Path,
               brokers: dict[str, int] | None = None, client_warm: int | None = None) -> dict:
    """One JVM of ``RemotingClient bench ... stepped``: at each phase boundary it waits while the
    CPU time of ``brokers`` ({name: pid}) and of the client JVM itself is read; the result gains
    ``cpu_ms_per_message`` for the send and the consume phase. ``client_warm``: the sends this
    JVM makes before the measured ones (default 100)."""
    classpath = f"{JAVA_DIR / 'target' / 'classes'}:" + \
        (JAVA_DIR / "target" / "classpath.txt").read_text().strip()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            ["java", "-Xmx512m", f"-Drocketmq.client.logRoot={log_root}",
             *([f"-Drtimer.warm={client_warm}"] if client_warm is not None else []),
             "-cp", classpath,
             "rtimer.RemotingClient", "bench", namesrv, topic, f"{topic}-group", str(messages),
             str(body), "stepped"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
            text=True)
        watchdog = threading.Timer(JAVA_TIMEOUT_S, proc.kill)
        watchdog.start()
        cpu = ProcessCpu({**(brokers or {}), "client": proc.pid})
        marks: dict[str, dict[str, float]] = {}
        result, tail = None, []
        try:
            assert proc.stdout is not None and proc.stdin is not None
            for line in proc.stdout:
                tail = (tail + [line])[-20:]
                event = json.loads(line) if line.startswith("{") else {}
                if event.get("event") == "phase":
                    marks[event["phase"]] = cpu.read()
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
                elif event.get("event") == "bench":
                    result = event
            proc.wait(60)
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if result is None or len(marks) != 4:
            err.seek(0)
            raise RuntimeError(f"the Java bench printed no result (exit {proc.returncode}):\n"
                               f"{''.join(tail)}\n{err.read()[-2000:]}")
    result["cpu_ms_per_message"] = {
        "send": ProcessCpu.ms_per(marks["send"], marks["sent"], messages),
        "consume": ProcessCpu.ms_per(marks["consume"], marks["consumed"], result["consumed"])}
    return result


def rtimer_side(data: Path, messages: int, body: int, log_root: Path) -> dict:
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "--data-dir", str(data), "run", "--grpc-listen", "off",
         "--remoting-listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        start_new_session=True)  # placed as the real broker is (bench.fronts' Rtimer)
    try:
        port = None
        for line in proc.stdout:
            match = _LISTENING.search(line)
            if match:
                port = int(match.group(1))
                break
        if port is None:
            raise RuntimeError("rtimer run did not start")
        # drained, so that a log line never blocks the broker on a full pipe
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        return java_bench(f"127.0.0.1:{port}", "BenchRemoting", messages, body, log_root,
                          {"broker": proc.pid})
    finally:
        proc.terminate()
        proc.wait(60)


def rocketmq_side(root: Path, messages: int, body: int, log_root: Path) -> dict:
    try:
        from bench.rocketmq.cluster import RocketMQCluster
    except ImportError as exc:
        return {"measured": False, "reason": f"bench.rocketmq.cluster is not here: {exc}"}
    try:
        with RocketMQCluster(root) as mq:
            for topic in ("BenchRemoting", "BenchRemoting-warmup"):
                mq.create_topic(topic, "NORMAL")
            figures = java_bench(mq.namesrv_addr, "BenchRemoting", messages, body, log_root,
                                 {"broker": mq.broker_pid, "namesrv": mq.namesrv.pid})
    except Exception as exc:  # noqa: BLE001 - reported in the result, the rtimer side stands
        return {"measured": False, "reason": f"{type(exc).__name__}: {exc}"}
    figures["measured"] = True
    return figures


def _cpu(figures: dict) -> str:
    return ", ".join(f"{name} {value:.3f}" for name, value in figures.items())


def summary(result: dict) -> str:
    lines = [f"remoting, Java 4.9.8 client, {result['messages']} messages of "
             f"{result['body_bytes']} B, one send at a time:"]
    for name in ("rtimer", "rocketmq"):
        side = result[name]
        if not side.get("measured", True):
            lines.append(f"  {name:8s} not measured: {side['reason']}")
            continue
        cpu = side["cpu_ms_per_message"]
        lines.append(f"  {name:8s} send {side['sendPerSecond']:8.0f}/s   consume "
                     f"{side['consumePerSecond']:8.0f}/s   (all consumed: {side['complete']})")
        lines.append(f"  {'':8s} CPU ms per message: send {_cpu(cpu['send'])}; "
                     f"consume {_cpu(cpu['consume'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.remoting", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=5000, help="sends (and consumes) per side")
    parser.add_argument("--body", type=int, default=256, help="body bytes")
    parser.add_argument("--skip-rocketmq", action="store_true", help="measure rtimer only")
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if not (JAVA_DIR / "target" / "classes" / "rtimer" / "RemotingClient.class").exists():
        print("the Java client is not built: run `make java-remoting-client`", file=sys.stderr)
        return 2
    log_root = Path(tempfile.mkdtemp(prefix="bench-remoting-logs-"))
    with scratch_dir(args.results_dir and args.results_dir / "tmp", "bench-remoting-") as scratch:
        rtimer = rtimer_side(scratch / "rtimer", args.messages, args.body, log_root)
        rocketmq = ({"measured": False, "reason": "--skip-rocketmq"} if args.skip_rocketmq
                    else rocketmq_side(scratch / "rocketmq", args.messages, args.body, log_root))
    result = {"messages": args.messages, "body_bytes": args.body, "client": "rocketmq-client 4.9.8",
              "rtimer": rtimer, "rocketmq": rocketmq}
    text = summary(result)
    result["summary"] = text
    path = write_result("remoting", result, args.results_dir or RESULTS)
    print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
