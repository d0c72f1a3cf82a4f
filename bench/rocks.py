"""RocksDB engine benchmark: send, deliver, lateness, a 1M burst and tombstones, in one run.

    python -m bench.rocks [--messages 100000] [--burst 1000000] [--rate 5000] [--seconds 20]
    python -m bench.rocks --deliver-only 4    # the delivery figure alone, four times
    python -m bench.rocks --metrics           # also: the hot paths with metrics on and off
    python -m bench.rocks --metrics-only      # that comparison alone (bench/metrics_cost.py)

1. send: ``RocksTimerStore.schedule`` with single records and batches of 100 vs a raw rocksdict
   WriteBatch of the same (pre-encoded) keys and values; plus ``Broker.send_batch`` end to end.
2. deliver: due messages per second from the store into the CommitLog (manual clock jumped past
   every due time, drained by the broker's own delivery loop with the default settings) vs the
   CommitLog's own batched append rate for the same messages.
3. lateness: real clock, ``Broker.start()``, a producer keeping a steady ``--rate`` of messages
   falling due per second; lateness = time the copy was stored on its topic - due time.
   A consumer then reads them through the library (``Broker.pull_batch`` of 4,096, every
   body), and ``Broker.pull`` of 4,096 (``Message`` objects), each against the same append rate.
4. burst: ``--burst`` messages due in the same second, drained by the broker while a consumer
   thread reads them (``Broker.pull_batch``), in a child process so its peak RSS is its own:
   seconds until all are stored and until all are consumed; then the cost of an empty tick after all those deletions vs on a
   fresh store (the tombstone check). The earlier phases' dirty pages are synced first.
5. with ``--metrics``: sends and deliveries with metrics off, with the counters only, and with the
   metrics server scraped every ``--scrape-every`` seconds (``bench.metrics_cost``).
Results: bench/results/rocks.json (``--metrics-only``: rocks-metrics.json); a markdown summary
is printed.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench import metrics_cost
from bench.send_paths import bench_send_paths
from bench.common import median, peak_rss_mb, percentile, scratch_dir, settled_gc, write_result
from rocks_timer import Broker, BrokerConfig, ManualClock, Message, SystemClock
from rocks_timer.message_store import MessageStore
from rocks_timer.timer.keys import encode_key
from rocks_timer.timer.rocksdb.profiles import build_options
from rocks_timer.timer.rocksdb import RocksTimerStore
from rocks_timer.timer.store import TimerKey, TimerRecord
from rocks_timer.timer.values import encode_value

T0 = 1_767_225_600_000
CONSUME_PAGE = 4096


def records(n: int, seed: int, body: int = 1024, spread_ms: int = 3_600_000) -> list[TimerRecord]:
    rng = random.Random(seed)
    pool = [rng.randbytes(body) for _ in range(256)]
    return [TimerRecord(T0 + 1000 + rng.randrange(spread_ms),
                        Message("orders", pool[i % 256], msg_id=f"{seed:08X}{i:024X}"))
            for i in range(n)]


def bench_send(n: int, runs: int) -> dict:
    config = BrokerConfig().validate()
    recs = records(n, 1)
    keys = [encode_key(TimerKey(r.due_ms, r.message.topic, r.message.msg_id)) for r in recs]
    values = [encode_value(r.message, config.timer_compress_threshold) for r in recs]
    out = {}
    for batch in (1, 100):
        store_t, raw_t = [], []
        for _ in range(runs):  # interleaved so a noisy neighbour hits both sides alike
            with scratch_dir(prefix="send-") as d:
                store = RocksTimerStore.open(d / "s", config)
                fresh = [TimerRecord(r.due_ms, r.message.copy()) for r in recs]  # no warm caches
                with settled_gc():
                    start = time.perf_counter()
                    for i in range(0, n, batch):
                        store.schedule(fresh[i:i + batch], T0)
                    store_t.append(time.perf_counter() - start)
                store.close()
                raw_t.append(raw_writebatch(d / "raw", keys, values, batch,
                                            config.rocksdb_profile))
        out[f"batch{batch}"] = {
            "store_msgs_per_s": round(n / median(store_t)),
            "raw_msgs_per_s": round(n / median(raw_t)),
            "store_vs_raw": round(median(raw_t) / median(store_t), 3)}
    out["paths"] = bench_send_paths([r.message for r in recs], runs)
    return out


def raw_writebatch(path, keys, values, batch, profile: str) -> float:
    """The same keys and values through a bare rocksdict WriteBatch, same profile options."""
    from rocksdict import Rdict, WriteBatch, WriteOptions
    db = Rdict(str(path), build_options(profile), column_families={"timer": build_options(profile)})
    handle = db.get_column_family_handle("timer")
    options = WriteOptions()
    with settled_gc():
        start = time.perf_counter()
        for i in range(0, len(keys), batch):
            wb = WriteBatch(raw_mode=True)
            for j in range(i, min(i + batch, len(keys))):
                wb.put(keys[j], values[j], handle)
            db.write(wb, options)
        elapsed = time.perf_counter() - start
    del handle
    db.close()
    return elapsed


def bench_layouts(n: int, runs: int) -> dict:
    """The two layouts of the RocksDB engine in one run, interleaved: ``schedule`` in batches
    of 100 and delivery into the CommitLog (due messages drained by the broker's own delivery
    loop with default settings, as in production and as ``bench_deliver`` and the bursts)."""
    times: dict[str, dict[str, list[float]]] = {
        layout: {"send": [], "deliver": []} for layout in ("inline", "vlog")}
    for run in range(runs):
        for layout in ("inline", "vlog") if run % 2 == 0 else ("vlog", "inline"):
            recs = records(n, 4 + run)
            with scratch_dir(prefix=f"layout-{layout}-") as d:
                clock = ManualClock(T0)
                broker = Broker.open(d / "b", BrokerConfig(rocksdb_layout=layout), clock=clock)
                with settled_gc():
                    start = time.perf_counter()
                    for i in range(0, n, 100):
                        broker.timer.schedule(recs[i:i + 100], T0)
                    times[layout]["send"].append(time.perf_counter() - start)
                clock.set(T0 + 3_700_000)
                times[layout]["deliver"].append(loop_drain(broker, n))
                broker.close()
    out: dict = {layout: {f"{what}_msgs_per_s": round(n / median(t)) for what, t in parts.items()}
                 for layout, parts in times.items()}
    out["vlog_vs_inline"] = {
        what: round(median(times["inline"][what]) / median(times["vlog"][what]), 3)
        for what in ("send", "deliver")}
    return out


def bench_deliver(n: int) -> dict:
    recs = records(n, 2, spread_ms=60_000)
    with scratch_dir(prefix="deliver-") as d:
        clock = ManualClock(T0)
        broker = Broker.open(d / "b", BrokerConfig(), clock=clock)
        broker.timer.schedule(recs, T0)
        clock.set(T0 + 3_600_000)
        with settled_gc():  # both sides alike: the collector does not walk the inputs
            deliver_s = loop_drain(broker, n)  # the broker's own delivery loop, as in production
        with settled_gc():
            consume_s = timed_consume(broker, "orders", n)
        with settled_gc():
            pull_s = timed_pull(broker, "orders", n)
        broker.close()
        store = MessageStore.open(d / "append", BrokerConfig(), ManualClock(T0))
        msgs = [r.message.copy() for r in recs]
        with settled_gc():
            start = time.perf_counter()
            futures = [store.put_messages_async(msgs[i:i + 2000]) for i in range(0, n, 2000)]
            for future in futures:
                future.result()
            append_s = time.perf_counter() - start
        store.close()
    return {"deliver_msgs_per_s": round(n / deliver_s),
            "commitlog_append_msgs_per_s": round(n / append_s),
            "deliver_vs_append": round(append_s / deliver_s, 3),
            "consume_msgs_per_s": round(n / consume_s),
            "consume_vs_append": round(append_s / consume_s, 3),
            "pull_msgs_per_s": round(n / pull_s),
            "pull_vs_append": round(append_s / pull_s, 3)}


def consume_all(broker: Broker, topic: str, n: int, deadline_s: float = 300.0) -> int:
    """A consumer through the library: ``Broker.pull_batch`` of 4,096 from where the last one
    ended, every body taken (its bytes counted), until ``n`` messages are read; an empty page
    waits 1 ms. Returns the body bytes read."""
    offset = got = size = 0
    deadline = time.monotonic() + deadline_s
    while got < n:
        batch = broker.pull_batch(topic, 0, offset, CONSUME_PAGE)
        if not len(batch):
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumer: {got} of {n} read after {deadline_s} s")
            time.sleep(0.001)
            continue
        for body in batch.bodies():
            size += len(body)
        got += len(batch)
        offset = batch.next_offset
    return size


def timed_consume(broker: Broker, topic: str, n: int) -> float:
    start = time.perf_counter()
    consume_all(broker, topic, n)
    return time.perf_counter() - start


def timed_pull(broker: Broker, topic: str, n: int) -> float:
    """``Broker.pull`` of 4,096 (``Message`` objects, properties decoded), every body taken."""
    start = time.perf_counter()
    offset = got = 0
    while got < n:
        page = broker.pull(topic, 0, offset, CONSUME_PAGE)
        if not page:
            raise RuntimeError(f"pull: {got} of {n} read")
        got += sum(1 for m in page if m.body is not None)
        offset = page[-1].queue_offset + 1
    return time.perf_counter() - start


def bench_lateness(rate: int, seconds: int) -> dict:
    """A producer keeps ``rate`` messages a second falling due (batches every 20 ms, 1 s
    ahead) for ``seconds``; lateness of each delivered copy, and the rate actually sent."""
    with scratch_dir(prefix="lateness-") as d:
        broker = Broker.open(d, BrokerConfig(), clock=SystemClock()).start()
        stop = time.monotonic() + seconds
        sent = 0

        def producer():
            nonlocal sent
            tick_s = 0.02
            per_tick = max(1, int(rate * tick_s))
            next_at = time.monotonic()
            while time.monotonic() < stop:
                batch = [Message("late", b"x" * 256) for _ in range(per_tick)]
                broker.send_batch(batch, delay_ms=1000)
                sent += per_tick
                next_at += tick_s
                time.sleep(max(0.0, next_at - time.monotonic()))

        thread = threading.Thread(target=producer)
        thread.start()
        thread.join()
        deadline = time.monotonic() + 30
        while broker.max_offset("late") < sent and time.monotonic() < deadline:
            time.sleep(0.05)
        late, offset = [], 0
        while page := broker.pull("late", 0, offset, 5000):
            late.extend(m.store_ms - int(m.properties["TIMER_DELIVER_MS"]) for m in page)
            offset = page[-1].queue_offset + 1
        broker.close()
    return {"rate_per_s": rate, "seconds": seconds, "sent": sent, "delivered": len(late),
            "sent_per_s": round(sent / seconds),
            "p50_ms": percentile(late, 50), "p99_ms": percentile(late, 99),
            "max_ms": max(late) if late else None, "early": sum(1 for x in late if x < 0)}


def burst_child(n: int, layout: str) -> dict:
    """Runs in its own process: n messages due in one second, drained by the broker's own
    delivery loop (``start()``, pipelined); then tombstone costs."""
    rng = random.Random(3)
    pool = [rng.randbytes(1024) for _ in range(64)]
    with scratch_dir(prefix="burst-") as d:
        fresh_cost = empty_tick_cost(d / "fresh")
        clock = ManualClock(T0)
        broker = Broker.open(d / "b", BrokerConfig(rocksdb_layout=layout), clock=clock)
        due = T0 + 60_000
        for start in range(0, n, 10_000):  # generated in chunks: never all in memory
            chunk = [TimerRecord(due + rng.randrange(1000),
                                 Message("burst", pool[i % 64], msg_id=f"BB{i:030X}"))
                     for i in range(start, min(n, start + 10_000))]
            broker.timer.schedule(chunk, T0)
        rss_before = peak_rss_mb()
        clock.set(due + 1000)
        cpu = time.process_time()
        drain_s, consumed_s = loop_drain(broker, n, consume_topic="burst")
        cpu_us = (time.process_time() - cpu) / n * 1e6  # every thread of the process
        broker.tick()
        after_cost = empty_tick_cost(broker=broker, clock=clock)
        broker.close()
    return {"layout": layout, "messages": n, "drain_s": round(drain_s, 2),
            "consumed_s": round(consumed_s, 2), "consumed_msgs_per_s": round(n / consumed_s),
            "cpu_us_per_msg": round(cpu_us, 1), "drain_msgs_per_s": round(n / drain_s),
            "peak_rss_mb": round(peak_rss_mb(), 1), "peak_rss_before_drain_mb": round(rss_before, 1),
            "empty_tick_fresh_us": fresh_cost, "empty_tick_after_deletes_us": after_cost,
            "tombstone_ratio": round(after_cost / fresh_cost, 2)}


def loop_drain(broker: Broker, n: int, consume_topic: str | None = None):
    """Seconds until ``n`` deliveries completed with the broker's background loop running.
    With ``consume_topic``: a consumer thread (``consume_all``) reads the topic meanwhile,
    and the result is (stored seconds, consumed seconds), both from the start."""
    consumed: dict[str, object] = {}

    def consumer() -> None:
        try:
            consume_all(broker, consume_topic, n)
            consumed["s"] = time.perf_counter() - start
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller
            consumed["error"] = exc

    thread = threading.Thread(target=consumer, name="consumer")
    start = time.perf_counter()
    if consume_topic is not None:
        thread.start()
    broker.start()
    while broker.deliverer.delivered < n:
        time.sleep(0.005)
    elapsed = time.perf_counter() - start
    if consume_topic is None:
        broker.stop()
        return elapsed
    thread.join()
    broker.stop()
    if "error" in consumed:
        raise consumed["error"]
    return elapsed, consumed["s"]


def empty_tick_cost(path=None, broker=None, clock=None, reps: int = 2000) -> float:
    """Median µs of a broker tick with nothing due (the deliverer's scan from its cursor)."""
    own = broker is None
    if own:
        clock = ManualClock(T0)
        broker = Broker.open(path, BrokerConfig(), clock=clock)
        broker.send(Message("burst", b"x"), delay_ms=3_600_000)  # something pending, not due
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        broker.deliverer.step(clock.now_ms())
        samples.append((time.perf_counter() - start) * 1e6)
    if own:
        broker.close()
    return round(median(samples), 1)


def run_burst(n: int, layout: str) -> dict:
    os.sync()  # the earlier phases' dirty pages are written back before, not during, a burst
    child = subprocess.run([sys.executable, "-m", "bench.rocks", "--burst-child", str(n),
                            "--burst-layout", layout], capture_output=True, text=True, check=True)
    return json.loads(child.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rocks", description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--burst", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--high-rate", type=int, default=50_000,
                        help="a second lateness case, reported (no target)")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--results-dir", type=Path, default=None,
                        help="where the JSON goes (default bench/results)")
    parser.add_argument("--deliver-only", type=int, default=None, metavar="N",
                        help="only the delivery figure, N times in a row, one JSON line each "
                             "(comparing builds of the delivery path; writes no results file)")
    parser.add_argument("--bursts-only", action="store_true",
                        help="only the two bursts (vlog, inline), one JSON line each "
                             "(writes no results file)")
    parser.add_argument("--metrics", action="store_true",
                        help="also measure sends and deliveries with metrics on and off")
    parser.add_argument("--metrics-only", action="store_true",
                        help="only that comparison (writes rocks-metrics.json)")
    parser.add_argument("--scrape-every", type=float, default=1.0, metavar="S",
                        help="with --metrics: scrape /metrics and the dashboard JSON every S "
                             "seconds (default 1; Prometheus' default is 15)")
    parser.add_argument("--control", action="store_true",
                        help="with --metrics-only: a fourth round per run, off again, to show "
                             "the spread an A/A comparison gives on this machine")
    parser.add_argument("--burst-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--burst-layout", default="vlog", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.burst_child is not None:
        print(json.dumps(burst_child(args.burst_child, args.burst_layout)))
        return 0
    if args.deliver_only is not None:
        for _ in range(args.deliver_only):
            print(json.dumps(bench_deliver(args.messages)), flush=True)
        return 0
    if args.bursts_only:
        for layout in ("vlog", "inline"):
            print(json.dumps(run_burst(args.burst, layout)), flush=True)
        return 0
    if args.metrics_only:
        result = metrics_cost.bench_metrics(args.messages, args.runs, args.scrape_every,
                                            control=args.control)
        path = write_result("rocks-metrics", {"args": {k: str(v) for k, v in vars(args).items()},
                                              **result}, args.results_dir)
        print("| figure | measured | target |\n|---|---|---|")
        print("\n".join(metrics_cost.summary(result)))
        print(f"results: {path}")
        return 0
    result = {"profile": BrokerConfig().rocksdb_profile,
              "layout": BrokerConfig().rocksdb_layout,
              "send": bench_send(args.messages, args.runs),
              "deliver": bench_deliver(args.messages),
              "layouts": bench_layouts(args.messages, args.runs),
              "lateness": bench_lateness(args.rate, args.seconds),
              "lateness_high": bench_lateness(args.high_rate, max(1, args.seconds // 2))}
    result["bursts"] = {}
    for layout in ("vlog", "inline"):
        result["bursts"][layout] = run_burst(args.burst, layout)
    result["burst"] = result["bursts"]["vlog"]
    if args.metrics:
        result["metrics"] = metrics_cost.bench_metrics(args.messages, args.runs, args.scrape_every)
    path = write_result("rocks", {"args": {k: str(v) for k, v in vars(args).items()}, **result},
                        args.results_dir)
    s, dl, b = result["send"], result["deliver"], result["burst"]
    ly = result["layouts"]
    print("| figure | measured | target |\n|---|---|---|")
    for batch in ("batch1", "batch100"):
        print(f"| send {batch}: store / raw WriteBatch | {s[batch]['store_msgs_per_s']:,} / "
              f"{s[batch]['raw_msgs_per_s']:,} msg/s ({s[batch]['store_vs_raw']:.0%}) | >= 50% |")
    p = s["paths"]
    for batch, label in ((1, "Broker.send"), (100, "Broker.send_batch(100)")):
        for what in ("broker", "broker+deliverer"):
            print(f"| {label}{' (deliverer running)' if '+' in what else ''} / store schedule"
                  f"({batch}) | {p[f'{what}_batch{batch}']:,} / {p[f'store_batch{batch}']:,} "
                  f"msg/s ({p[f'{what}_vs_store_batch{batch}']:.0%}) | >= 60% |")
    print(f"| deliver into CommitLog / CommitLog append | {dl['deliver_msgs_per_s']:,} / "
          f"{dl['commitlog_append_msgs_per_s']:,} msg/s ({dl['deliver_vs_append']:.0%}) | >= 40% |")
    print(f"| consumer (Broker.pull_batch of {CONSUME_PAGE:,}, every body) / CommitLog append | "
          f"{dl['consume_msgs_per_s']:,} / {dl['commitlog_append_msgs_per_s']:,} msg/s "
          f"({dl['consume_vs_append']:.0%}) | >= 50% |")
    print(f"| Broker.pull of {CONSUME_PAGE:,} (Message objects) / CommitLog append | "
          f"{dl['pull_msgs_per_s']:,} / {dl['commitlog_append_msgs_per_s']:,} msg/s "
          f"({dl['pull_vs_append']:.0%}) | reported |")
    print(f"| vlog / inline, same run: schedule(100) | {ly['vlog']['send_msgs_per_s']:,} / "
          f"{ly['inline']['send_msgs_per_s']:,} msg/s ({ly['vlog_vs_inline']['send']:.0%}) | "
          f">= 80% |")
    print(f"| vlog / inline, same run: deliver into CommitLog | "
          f"{ly['vlog']['deliver_msgs_per_s']:,} / {ly['inline']['deliver_msgs_per_s']:,} msg/s "
          f"({ly['vlog_vs_inline']['deliver']:.0%}) | >= 80% |")
    for key, target in (("lateness", "p99 <= 100 ms, 0 early"), ("lateness_high", "reported")):
        la = result[key]
        print(f"| lateness at {la['rate_per_s']:,}/s (sent {la['sent_per_s']:,}/s): p50 / p99 / "
              f"max | {la['p50_ms']} / {la['p99_ms']} / {la['max_ms']} ms, early {la['early']} "
              f"| {target} |")
    for layout, bl in result["bursts"].items():
        print(f"| burst {bl['messages']:,} due in 1 s ({layout}): consumed (stored), peak RSS "
              f"| {bl['consumed_s']} s ({bl['drain_s']} s stored; {bl['cpu_us_per_msg']} µs CPU "
              f"each), {bl['peak_rss_mb']} MB | consumed <= 6 s, < 500 MB |")
    print(f"| empty tick: fresh / after {b['messages']:,} deletes | {b['empty_tick_fresh_us']} / "
          f"{b['empty_tick_after_deletes_us']} µs ({b['tombstone_ratio']}x) | <= 2x |")
    if args.metrics:
        print("\n".join(metrics_cost.summary(result["metrics"])))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
