"""What metrics cost the hot paths (issue 28): sends and deliveries with metrics off and on, in
one run, rounds interleaved so a noisy neighbour hits both sides alike.

- off: the broker with its metric counters (the delivery tally, the send delays) replaced by a
  C builtin that does nothing (``operator.is_``: the cheapest call there is, so "off" is the
  path with no metrics work at all), and no HTTP server;
- counters: the broker as shipped, no server (the counters are always kept);
- on: as shipped, with the metrics server of ``rtimer run --metrics-listen --dashboard`` running
  and a scraper fetching ``/metrics`` and ``/api/dashboard`` every ``scrape_s`` seconds
  (Prometheus scrapes every 15 s by default; 1 s is harsher). The scraper runs in a process of
  its own, as Prometheus does: its HTTP client's CPU is not the broker's.

Each round sends ``n / 5`` messages one ``Broker.send`` at a time, ``n`` through
``send_batch(100)``, then drains all of them through the broker's own delivery loop (manual
clock jumped past every due time). A run is one round of each variant back to back, the order
reversed every other run; each variant's figure is compared with the off round of the same run
(paired: a drift of the machine's speed between runs cancels), and the median of those ratios
over the runs is the figure. Run through ``python -m bench.rocks --metrics-only``; the scraper
child is ``python -m bench.metrics_cost --scrape URL EVERY``.
"""
from __future__ import annotations

import operator
import random
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from bench.common import median, scratch_dir, settled_gc
from rocks_timer import Broker, BrokerConfig, ManualClock, Message

T0 = 1_767_225_600_000
VARIANTS = ("off", "counters", "on")
CONTROL = "off-again"  # with control=True: off once more, the last round of a run (A/A)


class NoDeliveryTally:
    add = operator.is_  # a C builtin taking two arguments and doing nothing worth counting

    def as_dict(self) -> dict:
        return {"lateness_ms": {"bounds": [], "counts": [0], "sum": 0, "count": 0}, "early": 0,
                "by_topic": {}}


class NoDelayTally:
    add = operator.is_

    def as_dict(self) -> dict:
        return {"bounds": [], "counts": [0], "sum": 0, "count": 0}


def scrape_loop(base_url: str, every_s: float) -> int:
    """The scraper child: ``/metrics`` and ``/api/dashboard`` every ``every_s`` seconds until
    its standard input closes; prints how many scrapes it made."""
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    scrapes = 0
    while not stop.wait(every_s):
        for path in ("/metrics", "/api/dashboard"):
            with urllib.request.urlopen(base_url + path, timeout=30) as reply:
                reply.read()
        scrapes += 1
    print(scrapes, flush=True)
    return 0


class Scraper:
    """``scrape_loop`` in a child process (the broker's process pays for serving only)."""

    def __init__(self, base_url: str, every_s: float):
        self.child = subprocess.Popen(
            [sys.executable, "-m", "bench.metrics_cost", "--scrape", base_url, str(every_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            cwd=Path(__file__).resolve().parent.parent)

    def stop(self) -> int:
        out, _ = self.child.communicate(timeout=60)  # closing stdin stops it
        if self.child.returncode != 0:
            raise RuntimeError(f"the scraper failed (exit {self.child.returncode})")
        return int(out.strip())


def _round(variant: str, n: int, scrape_s: float, seed: int) -> tuple[dict, int]:
    rng = random.Random(seed)
    pool = [rng.randbytes(1024) for _ in range(64)]
    singles = [Message("orders", pool[i % 64]) for i in range(n // 5)]
    batched = [Message("orders", pool[i % 64]) for i in range(n)]
    with scratch_dir(prefix=f"metrics-{variant}-") as d:
        clock = ManualClock(T0)
        broker = Broker.open(d / "b", BrokerConfig(), clock=clock)
        server = scraper = None
        if variant in ("off", CONTROL):
            broker.deliverer.tally = NoDeliveryTally()
            broker.delays = NoDelayTally()
        if variant == "on":
            from rocks_timer.metrics import MetricsServer
            server = MetricsServer(broker, "127.0.0.1", 0, dashboard=True,
                                   labels={"cluster": "bench"}).start()
            scraper = Scraper(f"http://{server.address}", scrape_s)
        times: dict[str, tuple[float, float]] = {}  # path -> (wall s, process CPU s)
        with settled_gc():
            wall, cpu = time.perf_counter(), time.process_time()
            for i, msg in enumerate(singles):
                broker.send(msg, delay_ms=1_000 + (i % 60_000))
            times["send1"] = (time.perf_counter() - wall, time.process_time() - cpu)
            wall, cpu = time.perf_counter(), time.process_time()
            for i in range(0, n, 100):
                broker.send_batch(batched[i:i + 100], delay_ms=1_000 + (i % 60_000))
            times["send100"] = (time.perf_counter() - wall, time.process_time() - cpu)
            clock.set(T0 + 3_600_000)
            wall, cpu = time.perf_counter(), time.process_time()
            broker.start()
            total = len(singles) + n
            while broker.deliverer.delivered < total:
                time.sleep(0.002)
            times["deliver"] = (time.perf_counter() - wall, time.process_time() - cpu)
            broker.stop()
        scrapes = scraper.stop() if scraper is not None else 0
        if server is not None:
            server.stop()
        if variant not in ("off", CONTROL):
            assert broker.stats()["deliveries"]["early"] == 0
        broker.close()
    return times, scrapes


def bench_metrics(n: int, runs: int, scrape_s: float = 1.0, control: bool = False) -> dict:
    """msg/s per path and variant, from wall time and from the process's CPU time (every
    thread of the broker's process: the metrics server's work included), medians over ``runs``
    interleaved rounds, and each variant against off: the median over the runs of the ratio
    within a run (``*_vs_off``, ``*_vs_off_cpu``), and the ratio of the medians for reference
    (``*_medians_vs_off*``). On a shared machine the CPU figure is the steadier: waiting for a
    core neighbours hold counts in wall time only. ``control``: a fourth round per run, off
    again, compared with off like the others: the spread an A/A comparison shows on this machine
    (the rounds furthest apart in a run, so the widest)."""
    paths = ("send1", "send100", "deliver")
    variants = VARIANTS + ((CONTROL,) if control else ())
    walls: dict[str, dict[str, list[float]]] = {v: {p: [] for p in paths} for v in variants}
    cpus: dict[str, dict[str, list[float]]] = {v: {p: [] for p in paths} for v in variants}
    scrapes = 0
    for run in range(runs):
        order = variants if run % 2 == 0 else tuple(reversed(variants))
        for variant in order:
            times, scraped = _round(variant, n, scrape_s, seed=run)
            scrapes += scraped
            for path, (wall, cpu) in times.items():
                walls[variant][path].append(wall)
                cpus[variant][path].append(cpu)
    counts = {"send1": n // 5, "send100": n, "deliver": n + n // 5}
    out: dict = {"messages": n, "runs": runs, "scrape_every_s": scrape_s,
                 "scrapes_during_on": scrapes, "scrape_cost": scrape_cost(n + n // 5)}
    for variant in variants:
        out[variant] = {f"{path}_msgs_per_s": round(counts[path] / median(walls[variant][path]))
                        for path in counts}
        out[variant].update({f"{path}_msgs_per_cpu_s": round(counts[path] /
                                                             median(cpus[variant][path]))
                             for path in counts})
    for variant in variants[1:]:
        for suffix, times in (("", walls), ("_cpu", cpus)):
            out[f"{variant}_vs_off{suffix}"] = {
                path: round(median([off / mine for off, mine in zip(times["off"][path],
                                                                     times[variant][path])]), 3)
                for path in counts}
            out[f"{variant}_vs_off{suffix}_by_run"] = {
                path: [round(off / mine, 3) for off, mine in zip(times["off"][path],
                                                                 times[variant][path])]
                for path in counts}
            out[f"{variant}_medians_vs_off{suffix}"] = {
                path: round(median(times["off"][path]) / median(times[variant][path]), 3)
                for path in counts}
    return out


def scrape_cost(n: int, reps: int = 5) -> dict:
    """CPU ms of one ``/metrics`` answer and one dashboard JSON with ``n`` messages pending (two
    topics), median over ``reps``: what a scrape costs, to spread over the scrape interval."""
    from prometheus_client import CollectorRegistry, generate_latest

    from rocks_timer.metrics import BrokerCollector, dashboard_document
    rng = random.Random(5)
    pool = [rng.randbytes(1024) for _ in range(64)]
    with scratch_dir(prefix="metrics-scrape-") as d:
        broker = Broker.open(d / "b", BrokerConfig(), clock=ManualClock(T0))
        for i in range(0, n, 1000):
            broker.send_batch([Message("orders" if j % 2 else "billing", pool[j % 64])
                               for j in range(min(1000, n - i))],
                              delay_ms=1_000 + rng.randrange(86_400_000))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(BrokerCollector(broker, {"cluster": "bench"}))
        metrics_ms, dashboard_ms = [], []
        for _ in range(reps):
            cpu = time.process_time()
            generate_latest(registry)
            metrics_ms.append((time.process_time() - cpu) * 1000)
            cpu = time.process_time()
            dashboard_document(broker)
            dashboard_ms.append((time.process_time() - cpu) * 1000)
        broker.close()
    return {"pending": n, "metrics_cpu_ms": round(median(metrics_ms), 1),
            "dashboard_cpu_ms": round(median(dashboard_ms), 1)}


def summary(result: dict) -> list[str]:
    """Markdown rows: on / off and counters / off per path (the paired medians)."""
    lines = []
    for path, label in (("send1", "Broker.send"), ("send100", "Broker.send_batch(100)"),
                        ("deliver", "deliver into CommitLog")):
        key, cpu = f"{path}_msgs_per_s", f"{path}_msgs_per_cpu_s"
        lines.append(f"| metrics on / off: {label}, per CPU second | {result['on'][cpu]:,} / "
                     f"{result['off'][cpu]:,} msg/s ({result['on_vs_off_cpu'][path]:.1%}; "
                     f"counters only {result['counters_vs_off_cpu'][path]:.1%}; median of "
                     f"{result['runs']} paired runs) | >= 97% |")
        lines.append(f"| metrics on / off: {label}, wall clock | {result['on'][key]:,} / "
                     f"{result['off'][key]:,} msg/s ({result['on_vs_off'][path]:.1%}; counters "
                     f"only {result['counters_vs_off'][path]:.1%}) | reported |")
    if CONTROL in result:
        control = result[f"{CONTROL}_vs_off_cpu"]
        lines.append("| control: off / off again (A/A), per CPU second | " + ", ".join(
            f"{label} {control[path]:.1%} ({min(result[f'{CONTROL}_vs_off_cpu_by_run'][path]):.2f}"
            f"-{max(result[f'{CONTROL}_vs_off_cpu_by_run'][path]):.2f} by run)"
            for path, label in (("send1", "send"), ("send100", "send_batch"),
                                ("deliver", "deliver"))) + " | the noise floor |")
    cost = result.get("scrape_cost")
    if cost:
        lines.append(f"| one /metrics scrape / one dashboard poll, {cost['pending']:,} pending | "
                     f"{cost['metrics_cpu_ms']} / {cost['dashboard_cpu_ms']} ms CPU "
                     f"({cost['metrics_cpu_ms'] / 150:.2f}% of a core at a 15 s scrape interval)"
                     f" | reported |")
    return lines


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--scrape":
        sys.exit(scrape_loop(sys.argv[2], float(sys.argv[3])))
    sys.exit("usage: python -m bench.metrics_cost --scrape BASE_URL EVERY_S "
             "(the scraper child; the benchmark is python -m bench.rocks --metrics-only)")
