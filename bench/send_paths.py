"""The send path end to end against the store it feeds, in one run (issue: hot paths).

Four ways to put the same 1 KiB timer messages away, interleaved round by round so a noisy
neighbour hits all of them alike:

- ``store``: ``RocksTimerStore.schedule`` (records built beforehand, as ``bench.rocks`` does);
- ``broker``: ``Broker.send`` / ``Broker.send_batch`` on a broker with a manual clock (no
  background threads);
- ``broker+deliverer``: the same on a started broker (real clock, the deliverer's thread
  running; the messages are due in an hour, so it claims nothing and only wakes).

Each in single calls and in batches of 100; the ratios broker / store are what the issue's
targets (>= 60%) are about.
"""
from __future__ import annotations

import time

from bench.common import median, scratch_dir, settled_gc
from rocks_timer import Broker, BrokerConfig, ManualClock, Message, SystemClock
from rocks_timer.timer.rocksdb import RocksTimerStore
from rocks_timer.timer.store import TimerRecord

HOUR_MS = 3_600_000


def _messages(base: list[Message]) -> list[Message]:
    return [m.copy() for m in base]  # fresh objects each round: no cached encodings


def _store_rate(base: list[Message], batch: int, layout: str) -> float:
    with scratch_dir(prefix="send-store-") as d:
        store = RocksTimerStore.open(d / "s", BrokerConfig(rocksdb_layout=layout).validate())
        now = int(time.time() * 1000)
        recs = [TimerRecord(now + HOUR_MS, m) for m in _messages(base)]
        with settled_gc():
            start = time.perf_counter()
            for i in range(0, len(recs), batch):
                store.schedule(recs[i:i + batch], now)
            elapsed = time.perf_counter() - start
        store.close()
    return elapsed


def _broker_rate(base: list[Message], batch: int, layout: str, started: bool) -> float:
    with scratch_dir(prefix="send-broker-") as d:
        clock = SystemClock() if started else ManualClock(int(time.time() * 1000))
        broker = Broker.open(d / "b", BrokerConfig(rocksdb_layout=layout), clock=clock)
        if started:
            broker.start()
        msgs = _messages(base)
        with settled_gc():
            start = time.perf_counter()
            if batch == 1:
                send = broker.send
                for m in msgs:
                    send(m, delay_ms=HOUR_MS)
            else:
                for i in range(0, len(msgs), batch):
                    broker.send_batch(msgs[i:i + batch], delay_ms=HOUR_MS)
            elapsed = time.perf_counter() - start
        broker.close()
    return elapsed


def bench_send_paths(base: list[Message], runs: int, layout: str = "vlog") -> dict:
    """msg/s of every variant (median over ``runs`` interleaved rounds) and the ratios."""
    variants = {f"{what}_batch{batch}": (what, batch)
                for batch in (1, 100) for what in ("store", "broker", "broker+deliverer")}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(runs):
        for name, (what, batch) in variants.items():
            if what == "store":
                times[name].append(_store_rate(base, batch, layout))
            else:
                times[name].append(_broker_rate(base, batch, layout, what != "broker"))
    n = len(base)
    out: dict = {name: round(n / median(t)) for name, t in times.items()}
    for batch in (1, 100):
        store = median(times[f"store_batch{batch}"])
        for what in ("broker", "broker+deliverer"):
            out[f"{what}_vs_store_batch{batch}"] = round(
                store / median(times[f"{what}_batch{batch}"]), 3)
    return out
