"""Benchmark of the file wheel engine: enqueue/delivery throughput and delivery lateness.

    python -m bench.wheel [--messages 50000] [--rate 2000] [--seconds 10] [--out bench/results/wheel.json]

Throughput runs under a manual clock (time does not pass, only work is measured). Lateness runs
under the real clock with a steady stream of messages due 0.5-3 s (default) after sending; lateness is
(CommitLog store time of the delivered copy) - (requested deliver time), and must never be < 0.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from rocks_timer.clock import ManualClock, SystemClock
from rocks_timer.config import BrokerConfig
from rocks_timer.message import Message
from rocks_timer.message_store import MessageStore
from rocks_timer.timer.store import TimerRecord
from rocks_timer.timer.wheel import WheelTimerStore

START_MS = 1_700_000_000_000


def _deliver(wheel: WheelTimerStore, store: MessageStore, now_ms: int, batch: int) -> list:
    """The deliverer's step: claim, put all (group commit), wait, complete."""
    records = wheel.claim_due(now_ms, batch, 64 << 20)
    futures = [store.put_message_async(r.message) for r in records]
    results = [store.wait(f) for f in futures]
    wheel.complete(records, None)
    return list(zip(records, results))


def throughput(root: Path, messages: int, body_size: int, seed: int) -> dict:
    rng = random.Random(seed)
    config = BrokerConfig(timer_engine="wheel")
    clock = ManualClock(START_MS)
    store = MessageStore.open(root / "store", config, clock)
    wheel = WheelTimerStore.open(root / "wheel", store, config, clock=clock)
    body = b"a" * body_size
    payload = 0
    t0 = time.perf_counter()
    for start in range(0, messages, 1000):
        records = [TimerRecord(START_MS + 1000 + rng.randrange(60_000),
                               Message(topic="Bench", body=body))
                   for _ in range(min(1000, messages - start))]
        payload += sum(r.message.payload_size for r in records)
        wheel.schedule(records, clock.now_ms())
    schedule_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    while wheel.stats().extra["queue_offset"] < messages:
        wheel.maintain(clock.now_ms())
    enqueue_s = time.perf_counter() - t1
    clock.set(START_MS + 62_000)
    t2 = time.perf_counter()
    delivered = 0
    while delivered < messages:
        got = _deliver(wheel, store, clock.now_ms(), 2000)
        if not got:
            break
        delivered += len(got)
    deliver_s = time.perf_counter() - t2
    wheel.maintain(clock.now_ms() + 10_000)
    stats = wheel.stats()
    delivery_bytes = store.bytes_written_by_topic().get("Bench", 0)
    wheel.close()
    store.close()
    timer_bytes = sum(stats.bytes_written.values())
    return {
        "messages": messages, "body_size": body_size, "delivered": delivered,
        "schedule_msgs_per_s": round(messages / schedule_s),
        "enqueue_msgs_per_s": round(messages / enqueue_s),
        "deliver_msgs_per_s": round(delivered / deliver_s) if deliver_s else None,
        "payload_bytes": payload, "bytes_written": stats.bytes_written,
        "delivery_bytes": delivery_bytes,
        "wa_timer_subsystem": round(timer_bytes / payload, 3),
        "wa_with_delivery": round((timer_bytes + delivery_bytes) / payload, 3),
    }


def lateness(root: Path, rate: int, seconds: float, seed: int,
             delay_ms: tuple[int, int] = (500, 3000)) -> dict:
    rng = random.Random(seed)
    config = BrokerConfig(timer_engine="wheel", timer_flush_interval_ms=1000)
    clock = SystemClock()
    store = MessageStore.open(root / "store", config, clock)
    wheel = WheelTimerStore.open(root / "wheel", store, config, clock=clock)
    begin = clock.now_ms()
    sent = 0
    late: list[int] = []
    end_send = begin + int(seconds * 1000)
    while True:
        now = clock.now_ms()
        if now < end_send:
            target = (now - begin) * rate // 1000
            records = [TimerRecord(now + rng.randint(*delay_ms), Message(topic="Lat", body=b"l"))
                       for _ in range(max(0, target - sent))]
            if records:
                records = [TimerRecord(r.due_ms, r.message.with_properties(
                    {"BENCH_DUE_MS": str(r.due_ms)})) for r in records]
                wheel.schedule(records, now)
                sent += len(records)
        wheel.maintain(now)
        for record, result in _deliver(wheel, store, clock.now_ms(), 5000):
            late.append(result.store_ms - int(record.message.properties["BENCH_DUE_MS"]))
        if now >= end_send and len(late) >= sent:
            break
        if now > end_send + 10_000:
            break
        time.sleep(0.005)
    wheel.close()
    store.close()
    late.sort()

    def pct(q: float) -> int | None:
        return late[min(len(late) - 1, int(q * len(late)))] if late else None

    return {"rate_per_s": rate, "seconds": seconds, "delay_ms": list(delay_ms), "sent": sent, "delivered": len(late),
            "precision_ms": wheel.precision_ms,
            "lateness_ms": {"p50": pct(0.50), "p99": pct(0.99), "max": late[-1] if late else None,
                            "mean": round(statistics.fmean(late), 1) if late else None},
            "early": sum(1 for x in late if x < 0)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--body-size", type=int, default=128)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--min-delay-ms", type=int, default=500)
    parser.add_argument("--max-delay-ms", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=Path("bench/results/wheel.json"))
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="where to put the stores (default: a temp dir; use a real disk)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.data_dir) as tmp:
        root = Path(tmp)
        result = {"engine": "wheel",
                  "throughput": throughput(root / "tp", args.messages, args.body_size, args.seed),
                  "lateness": lateness(root / "lat", args.rate, args.seconds, args.seed,
                                      (args.min_delay_ms, args.max_delay_ms))}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    tp, lat = result["throughput"], result["lateness"]
    print("## wheel engine\n")
    print("| messages | schedule msg/s | enqueue msg/s | deliver msg/s | WA timer | WA +delivery |")
    print("|---|---|---|---|---|---|")
    print(f"| {tp['messages']} | {tp['schedule_msgs_per_s']} | {tp['enqueue_msgs_per_s']} | "
          f"{tp['deliver_msgs_per_s']} | {tp['wa_timer_subsystem']} | {tp['wa_with_delivery']} |")
    print()
    print("| rate/s | sent | delivered | p50 ms | p99 ms | max ms | early |")
    print("|---|---|---|---|---|---|---|")
    lm = lat["lateness_ms"]
    print(f"| {lat['rate_per_s']} | {lat['sent']} | {lat['delivered']} | {lm['p50']} | "
          f"{lm['p99']} | {lm['max']} | {lat['early']} |")
    print(f"\nbytes written: {json.dumps(tp['bytes_written'])}; results in {args.out}")
    return result


if __name__ == "__main__":
    main()
