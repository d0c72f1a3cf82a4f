"""Shared fixtures: a manual clock, brokers on tmp dirs, and one local Spark session per run."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rocks_timer import Broker, BrokerConfig, ManualClock  # noqa: E402

from tests.support.engine_helpers import START_MS, engine_settings  # noqa: E402
from tests.support.event_loops import restore_main_loop  # noqa: E402


@pytest.fixture(autouse=True)
def main_thread_keeps_an_event_loop():
    """After each test, the main thread has an event loop again (support/event_loops.py)."""
    yield
    restore_main_loop()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
def small_config() -> BrokerConfig:
    """Small files so segment rolls and retention happen in tests."""
    return BrokerConfig(commitlog_segment_size=1 << 20, max_message_size=64 * 1024,
                        consume_queue_entries_per_file=64).validate()


@pytest.fixture
def make_broker(tmp_path, clock):
    opened: list[Broker] = []

    def make(engine: str = "memory", path: Path | None = None, **overrides) -> Broker:
        config = BrokerConfig(**{**engine_settings(engine), **overrides}).validate()
        broker = Broker.open(path or tmp_path / f"data-{engine}", config, clock=clock)
        opened.append(broker)
        return broker

    yield make
    try:  # every test on these brokers ends with the invariant walk (diskcache's habit)
        for broker in opened:
            if not broker._closed:
                report = broker.check()
                assert report.ok, f"Broker.check() on {broker.path}: {report.problems}"
    finally:
        for broker in opened:
            broker.close()


@pytest.fixture(scope="session")
def spark():
    """One local[2] Spark session for the whole run (it costs ~7 s to start)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from spark.session import build_session

    session = build_session("local[2]", app_name="rocks-timer-tests")
    yield session
    session.stop()
