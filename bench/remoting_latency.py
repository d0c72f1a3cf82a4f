"""``python -m bench.remoting_latency``: how long one SEND_MESSAGE_V2 takes to be answered, by
rtimer's remoting front and by the real RocketMQ 5.5.1 broker, one request at a time.

A small raw client in this process (a blocking socket, the request shaped as the Java 4.9.8
client shapes it: a JSON header with the one-letter V2 fields, properties ``UNIQ_KEY``, ``KEYS``,
``TAGS``, ``WAIT``) sends ``--messages`` messages of ``--body`` bytes to the broker's own address
(rtimer's remoting port; RocketMQ's broker port, as a client does after the NameServer's route),
waiting for each reply before the next request. Per request it records the time from the request's
write to the reply's last byte, and how many ``recv`` calls the reply took (a reply written in
pieces shows as more than one). Rounds alternate which broker goes first; before the first round
each broker gets ``--warm`` sends (the JVM compiles its send path). The result holds per side the
latency p50/p90/p99/mean in microseconds, the broker's CPU per request (``/proc/<pid>/stat``),
and the first reply's header and its raw bytes, so that the two brokers' answers to the same
request can be compared field by field.

Run it under ``flock /work/bench.lock`` (it starts the RocketMQ JVMs); results go to
bench/results/remoting_latency.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.common import RESULTS, ProcessCpu, scratch_dir, write_result
from rocks_timer.remoting.command import RemotingCommand, decode, frame_size

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "BenchLatency"


def send_request(opaque: int, topic: str, body: bytes, uniq: str,
                 deliver_ms: int | None = None) -> bytes:
    """A SEND_MESSAGE_V2 frame as the Java 4.9.8 client writes one (JSON header, V2 names);
    with ``deliver_ms``, a timer message (``TIMER_DELIVER_MS``)."""
    props = f"KEYS\x01k{opaque}\x02UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02TAGS\x01bench\x02"
    if deliver_ms is not None:
        props += f"TIMER_DELIVER_MS\x01{deliver_ms}\x02"
    ext = {"a": "bench-producer", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": props, "j": "0", "k": "false",
           "m": "false"}
    return RemotingCommand(310, opaque, ext=ext, body=body, language="JAVA",
                           version=399).encode()


class Probe:
    """One connection to a broker; ``send`` one request and time its reply."""

    def __init__(self, host: str, port: int, body: int, prefix: str):
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.body = os.urandom(body)
        self.prefix = prefix
        self.opaque = 0
        self.first_reply: bytes | None = None

    def send(self) -> tuple[float, int, RemotingCommand]:
        self.opaque += 1
        frame = send_request(self.opaque, TOPIC, self.body,
                             f"{self.prefix}{self.opaque:012X}")
        started = time.perf_counter()
        self.sock.sendall(frame)
        data, reads = b"", 0
        need = 8
        while len(data) < need:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            reads += 1
            data += chunk
            if need == 8 and len(data) >= 8:
                need = 4 + frame_size(data[:8])[0]
        elapsed = time.perf_counter() - started
        if self.first_reply is None:
            self.first_reply = data
        reply = decode(int.from_bytes(data[4:8], "big"), data[8:need])
        if reply.code != 0 or reply.opaque != self.opaque:
            raise RuntimeError(f"send {self.opaque} answered {reply.code}: {reply.remark}")
        return elapsed, reads, reply

    def close(self) -> None:
        self.sock.close()


def measure(probe: Probe, n: int, pids: dict[str, int]) -> dict:
    cpu = ProcessCpu(pids)
    times, reads = [], []
    before = cpu.read()
    for _ in range(n):
        elapsed, count, _ = probe.send()
        times.append(elapsed * 1e6)
        reads.append(count)
    after = cpu.read()
    times.sort()
    return {"p50_us": round(times[len(times) // 2], 1),
            "p90_us": round(times[int(len(times) * 0.9)], 1),
            "p99_us": round(times[int(len(times) * 0.99)], 1),
            "mean_us": round(statistics.fmean(times), 1),
            "replies_in_one_recv": round(reads.count(1) / len(reads), 4),
            "cpu_ms_per_request": ProcessCpu.ms_per(before, after, n)}


def reply_shape(probe: Probe) -> dict:
    data = probe.first_reply or b""
    total, header_len = frame_size(data[:8])
    header = data[8:8 + header_len]
    return {"frame_bytes": len(data), "serialize_type": data[4], "header_bytes": header_len,
            "body_bytes": total - 4 - header_len,
            "header": header.decode("utf-8", "replace") if data[4] == 0 else header.hex()}


def start_rtimer(data: Path, loop: str | None = None) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "--data-dir", str(data), "run", "--grpc-listen", "off",
         "--remoting-listen", "127.0.0.1:0", *(["--loop", loop] if loop else [])],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    listening = re.compile(r"remoting .* listening on 127\.0\.0\.1:(\d+)")
    seen = []
    for line in proc.stdout:
        seen.append(line)
        match = listening.search(line)
        if match:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, int(match.group(1))
    raise RuntimeError("rtimer run did not start:\n" + "".join(seen[-20:]))


def run(scratch: Path, n: int, rounds: int, body: int, warm: int, skip_rocketmq: bool,
        loop: str | None = None) -> dict:
    rtimer_proc, rtimer_port = start_rtimer(scratch / "rt", loop)
    mq = None
    try:
        probes = {"rtimer": Probe("127.0.0.1", rtimer_port, body, "0A00000100000000000A")}
        pids = {"rtimer": {"broker": rtimer_proc.pid}}
        if not skip_rocketmq:
            from bench.rocketmq.cluster import RocketMQCluster
            mq = RocketMQCluster(scratch / "rocketmq")
            mq.start()
            mq.create_topic(TOPIC, "NORMAL")
            host, port = mq.broker_addr.rsplit(":", 1)
            probes["rocketmq"] = Probe(host, int(port), body, "0A00000100000000000B")
            pids["rocketmq"] = {"broker": mq.broker_pid}
        for probe in probes.values():
            for _ in range(warm):
                probe.send()
        result = {side: {"rounds": [], "reply": reply_shape(probe)}
                  for side, probe in probes.items()}
        sides = list(probes)
        for r in range(rounds):
            for side in (sides if r % 2 == 0 else sides[::-1]):
                figures = measure(probes[side], n, pids[side])
                result[side]["rounds"].append(figures)
                print(f"round {r + 1} {side}: {figures}", flush=True)
        for side in sides:
            for key in ("p50_us", "p99_us", "mean_us"):
                result[side][key] = statistics.median(f[key] for f in result[side]["rounds"])
            result[side]["cpu_ms_per_request"] = statistics.median(
                f["cpu_ms_per_request"]["broker"] for f in result[side]["rounds"])
        for probe in probes.values():
            probe.close()
        return result
    finally:
        rtimer_proc.terminate()
        rtimer_proc.wait(60)
        if mq is not None:
            mq.stop()


def summary(result: dict) -> str:
    lines = [f"one SEND_MESSAGE_V2 at a time, {result['messages']} per round, "
             f"{result['rounds']} rounds, {result['body_bytes']} B bodies (medians of rounds):"]
    for side in ("rtimer", "rocketmq"):
        if side in result["sides"]:
            s = result["sides"][side]
            lines.append(f"  {side:8s} p50 {s['p50_us']:7.1f} us  p99 {s['p99_us']:7.1f} us  "
                         f"mean {s['mean_us']:7.1f} us  broker CPU {s['cpu_ms_per_request']:.3f} "
                         f"ms/request")
            lines.append(f"  {'':8s} reply: {s['reply']['header']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.remoting_latency", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=3000, help="sends per broker and round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--body", type=int, default=256, help="body bytes")
    parser.add_argument("--warm", type=int, default=8000, help="untimed sends per broker first")
    parser.add_argument("--skip-rocketmq", action="store_true", help="measure rtimer only")
    parser.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default=None,
                        help="rtimer run --loop (default: rtimer's own default)")
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    with scratch_dir(args.results_dir and args.results_dir / "tmp",
                     "bench-rl-") as scratch:
        sides = run(scratch, args.messages, args.rounds, args.body, args.warm,
                    args.skip_rocketmq, args.loop)
    result = {"messages": args.messages, "rounds": args.rounds, "body_bytes": args.body,
              "warm": args.warm, "rtimer_loop": args.loop or "default", "sides": sides}
    result["summary"] = summary(result)
    path = write_result("remoting_latency", result, args.results_dir or RESULTS)
    print(result["summary"])
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
