"""Helpers shared by the engine tests: drive simulated time, collect deliveries."""
from __future__ import annotations

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the suite's manual clock start
# "rocksdb" is the engine with its default layout (vlog); "rocksdb-inline" the older layout
ENGINES = ["memory", "rocksdb", "rocksdb-inline", "wheel"]
DURABLE_ENGINES = ["rocksdb", "rocksdb-inline", "wheel"]


def engine_settings(engine: str) -> dict:
    """BrokerConfig settings of an engine name used by the tests ("rocksdb-<layout>")."""
    name, _, layout = engine.partition("-")
    settings = {"timer_engine": name}
    if layout:
        settings["rocksdb_layout"] = layout
    return settings


def drive(broker, clock, until_ms: int, step_ms: int = 100) -> int:
    """Advance the manual clock to ``until_ms`` in steps, ticking at each; returns deliveries."""
    delivered = broker.tick()
    while clock.now_ms() < until_ms:
        clock.advance(min(step_ms, until_ms - clock.now_ms()))
        delivered += broker.tick()
    for _ in range(5):  # let asynchronous puts land
        delivered += broker.tick()
    return delivered


def pulled(broker, topic: str, queue_id: int = 0) -> list:
    out, offset = [], 0
    while True:
        page = broker.pull(topic, queue_id, offset, 1000)
        if not page:
            return out
        out.extend(page)
        offset = page[-1].queue_offset + 1
