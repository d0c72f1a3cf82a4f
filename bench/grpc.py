"""``python -m bench.grpc``: the RocketMQ 5 gRPC front against the library path, in one run.

The gRPC side is the official Python client (rocketmq-python-client 5.1.2, unmodified) talking to
``rtimer run --grpc-listen 127.0.0.1:0`` in a subprocess; the library side is ``Broker`` +
``PopService`` in this process, on a data dir of the same kind. Measured, in this order:

- producer send/s: one send at a time (``Producer.send``), and ``send_async`` with every send of
  the round in flight; the library reference is ``Broker.send`` one at a time;
- end-to-end receive+ack/s: a SimpleConsumer takes batches of 32 (``receive``) and acks each
  message; the library reference pops 32 at a time and acks each;
- delay lateness: DELAY messages due at whole seconds (the client's unit), lateness = time the
  consumer has it (its receive returned; acks run on a small pool) − due time; the library
  reference pops on the broker's arrival signal.

Only ratios measured in the same run are quoted (docs/BENCHMARKS.md). Run it under
``flock /tmp/bench.lock``.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import RESULTS, import_client, percentile, scratch_dir, write_result

ROOT = Path(__file__).resolve().parent.parent
_LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")




def _start_broker(data: Path, home: Path) -> tuple[subprocess.Popen, int]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(home))
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "--data-dir", str(data), "run",
                             "--grpc-listen", "127.0.0.1:0", "--remoting-listen", "off"],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            break
        match = _LISTENING.search(line)
        if match:
            return proc, int(match.group(1))
    proc.kill()
    raise RuntimeError("rtimer run did not print its gRPC port")


def _rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else float("inf")


def _lateness(late_ms: list[float]) -> dict:
    return {"count": len(late_ms), "early": sum(1 for v in late_ms if v < 0),
            "p50_ms": round(percentile(late_ms, 50), 1),
            "p99_ms": round(percentile(late_ms, 99), 1),
            "max_ms": round(max(late_ms), 1) if late_ms else None}


# -- gRPC ------------------------------------------------------------------------------------------
def grpc_side(mq, endpoint: str, n: int, delays: int, spread_s: int, body: bytes) -> dict:
    config = mq.ClientConfiguration(endpoint, mq.Credentials(), request_timeout=10)

    def message(topic: str, deliver_s: int | None = None):
        msg = mq.Message()
        msg.topic, msg.body, msg.tag = topic, body, "bench"
        if deliver_s is not None:
            msg.delivery_timestamp = deliver_s
        return msg

    producer = mq.Producer(config, ("BenchSync", "BenchAsync", "BenchDelay"))
    producer.startup()
    producer.send(message("BenchWarm"))
    start = time.perf_counter()
    for _ in range(n):
        producer.send(message("BenchSync"))
    sync_s = time.perf_counter() - start
    start = time.perf_counter()
    futures = [producer.send_async(message("BenchAsync")) for _ in range(n)]
    for future in futures:
        future.result(60)
    async_s = time.perf_counter() - start

    consumer = mq.SimpleConsumer(config, "BenchGroup", {"BenchSync": mq.FilterExpression()},
                                 await_duration=2)
    consumer.startup()
    got, start = 0, time.perf_counter()
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        for msg in consumer.receive(32, 30):
            consumer.ack(msg)
            got += 1
    receive_s = time.perf_counter() - start
    consumer.shutdown()

    delay_consumer = mq.SimpleConsumer(config, "BenchDelayGroup",
                                       {"BenchDelay": mq.FilterExpression()}, await_duration=5)
    delay_consumer.startup()
    first_due = int(time.time()) + 2
    for i in range(delays):
        producer.send(message("BenchDelay", first_due + i % spread_s))
    late: list[float] = []
    acks: list = []
    ackers = ThreadPoolExecutor(4)
    deadline = time.monotonic() + spread_s + 30
    while len(late) < delays and time.monotonic() < deadline:
        batch = delay_consumer.receive(32, 30)
        now_ms = time.time() * 1000  # when the consumer has them
        late.extend(now_ms - msg.delivery_timestamp for msg in batch)
        # acked off the receiving thread, not in the next receive's way (the client's own
        # SimpleConsumer.ack_async returns None in 5.1.2, so a pool calls ack instead)
        acks.extend(ackers.submit(delay_consumer.ack, msg) for msg in batch)
    for ack in acks:
        ack.result(60)
    ackers.shutdown()
    delay_consumer.shutdown()
    producer.shutdown()
    return {"send_sync_per_s": _rate(n, sync_s), "send_async_per_s": _rate(n, async_s),
            "receive_ack_per_s": _rate(got, receive_s), "received": got,
            "lateness": _lateness(late)}


# -- library ---------------------------------------------------------------------------------------
def library_side(data: Path, n: int, delays: int, spread_s: int, body: bytes) -> dict:
    from rocks_timer import Broker, Message
    from rocks_timer.pop import PopService

    with Broker.open(data) as broker:
        broker.start()
        pop = PopService(broker)
        start = time.perf_counter()
        for _ in range(n):
            broker.send(Message(topic="BenchSync", body=body, tags="bench"))
        sync_s = time.perf_counter() - start
        got, start = 0, time.perf_counter()
        while got < n:
            for popped in pop.pop("BenchGroup", "BenchSync", 32, 30_000):
                pop.ack("BenchGroup", "BenchSync", popped.receipt_handle)
                got += 1
        receive_s = time.perf_counter() - start

        arrived = threading.Event()
        pop.watch(pop.watched_topics("BenchDelayGroup", "BenchDelay"), arrived.set)
        first_due_ms = (int(time.time()) + 2) * 1000
        for i in range(delays):
            broker.send(Message(topic="BenchDelay", body=body, tags="bench"),
                        deliver_at_ms=first_due_ms + (i % spread_s) * 1000)
        late: list[float] = []
        deadline = time.monotonic() + spread_s + 30
        while len(late) < delays and time.monotonic() < deadline:
            arrived.clear()
            found = pop.pop("BenchDelayGroup", "BenchDelay", 32, 30_000)
            now_ms = time.time() * 1000
            for popped in found:
                late.append(now_ms - int(popped.message.properties["TIMER_DELIVER_MS"]))
                pop.ack("BenchDelayGroup", "BenchDelay", popped.receipt_handle)
            if not found:
                arrived.wait(1.0)
        pop.close()
    return {"send_sync_per_s": _rate(n, sync_s), "receive_ack_per_s": _rate(got, receive_s),
            "lateness": _lateness(late)}


def summary(result: dict) -> str:
    g, lib = result["grpc"], result["library"]

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}" if b else "n/a"

    lines = [f"n = {result['n']} messages of {result['body_bytes']} B, {result['delays']} DELAY "
             f"messages over {result['spread_s']} s",
             "| measure | gRPC (official client) | library | gRPC / library |",
             "|---|---|---|---|",
             f"| send/s, one at a time | {g['send_sync_per_s']} | {lib['send_sync_per_s']} | "
             f"{ratio(g['send_sync_per_s'], lib['send_sync_per_s'])} |",
             f"| send/s, send_async (all in flight) | {g['send_async_per_s']} | "
             f"{lib['send_sync_per_s']} (one at a time) | "
             f"{ratio(g['send_async_per_s'], lib['send_sync_per_s'])} |",
             f"| receive+ack/s (batches of 32) | {g['receive_ack_per_s']} | "
             f"{lib['receive_ack_per_s']} | "
             f"{ratio(g['receive_ack_per_s'], lib['receive_ack_per_s'])} |",
             f"| delay lateness p50 / p99 / max (ms) | {g['lateness']['p50_ms']} / "
             f"{g['lateness']['p99_ms']} / {g['lateness']['max_ms']} | "
             f"{lib['lateness']['p50_ms']} / {lib['lateness']['p99_ms']} / "
             f"{lib['lateness']['max_ms']} | |",
             f"| delay messages early | {g['lateness']['early']} of {g['lateness']['count']} | "
             f"{lib['lateness']['early']} of {lib['lateness']['count']} | |"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.grpc", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000, help="sends per measure")
    parser.add_argument("--delays", type=int, default=300, help="DELAY messages")
    parser.add_argument("--spread", type=int, default=5, help="seconds the DELAY messages span")
    parser.add_argument("--body", type=int, default=256, help="body bytes")
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    body = b"x" * args.body
    home = Path(tempfile.mkdtemp(prefix="bench-grpc-home-"))
    mq = import_client(home)
    with scratch_dir(args.results_dir and args.results_dir / "tmp", "bench-grpc-") as scratch:
        library = library_side(scratch / "library", args.messages, args.delays, args.spread,
                               body)
        proc, port = _start_broker(scratch / "grpc", home)
        try:
            grpc_figures = grpc_side(mq, f"127.0.0.1:{port}", args.messages, args.delays,
                                     args.spread, body)
        finally:
            proc.terminate()
            proc.wait(60)
    result = {"n": args.messages, "delays": args.delays, "spread_s": args.spread,
              "body_bytes": args.body, "grpc": grpc_figures, "library": library}
    text = summary(result)
    result["summary"] = text
    path = write_result("grpc", result, args.results_dir or RESULTS)
    print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
