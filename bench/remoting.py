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
from pathlib import Path

from bench.common import RESULTS, scratch_dir, write_result

ROOT = Path(__file__).resolve().parent.parent
JAVA_DIR = ROOT / "tests" / "fronts" / "java"
_LISTENING = re.compile(r"remoting .* listening on 127\.0\.0\.1:(\d+)")


def java_bench(namesrv: str, topic: str, messages: int, body: int, log_root: Path) -> dict:
    classpath = f"{JAVA_DIR / 'target' / 'classes'}:" + \
        (JAVA_DIR / "target" / "classpath.txt").read_text().strip()
    done = subprocess.run(
        ["java", "-Xmx512m", f"-Drocketmq.client.logRoot={log_root}", "-cp", classpath,
         "rtimer.RemotingClient", "bench", namesrv, topic, f"{topic}-group", str(messages),
         str(body)], capture_output=True, text=True, timeout=1800)
    for line in done.stdout.splitlines():
        if line.startswith("{") and '"bench"' in line:
            return json.loads(line)
    raise RuntimeError(f"the Java bench printed no result (exit {done.returncode}):\n"
                       f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def rtimer_side(data: Path, messages: int, body: int, log_root: Path) -> dict:
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "--data-dir", str(data), "run", "--grpc-listen", "off",
         "--remoting-listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        port = None
        for line in proc.stdout:
            match = _LISTENING.search(line)
            if match:
                port = int(match.group(1))
                break
        if port is None:
            raise RuntimeError("rtimer run did not start")
        return java_bench(f"127.0.0.1:{port}", "BenchRemoting", messages, body, log_root)
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
            figures = java_bench(mq.namesrv_addr, "BenchRemoting", messages, body, log_root)
    except Exception as exc:  # noqa: BLE001 - reported in the result, the rtimer side stands
        return {"measured": False, "reason": f"{type(exc).__name__}: {exc}"}
    figures["measured"] = True
    return figures


def summary(result: dict) -> str:
    lines = [f"remoting, Java 4.9.8 client, {result['messages']} messages of "
             f"{result['body_bytes']} B, one send at a time:"]
    for name in ("rtimer", "rocketmq"):
        side = result[name]
        if not side.get("measured", True):
            lines.append(f"  {name:8s} not measured: {side['reason']}")
            continue
        lines.append(f"  {name:8s} send {side['sendPerSecond']:8.0f}/s   consume "
                     f"{side['consumePerSecond']:8.0f}/s   (all consumed: {side['complete']})")
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
