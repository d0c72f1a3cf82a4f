"""The disk figures of ``/metrics`` (``rtimer_data_dir_bytes``, ``rocketmq_storage_size``): equal
to a walk of the data dir after writes, read again once ``max_age_s`` has passed and not before,
with their age exported."""
from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from rocks_timer import Broker, BrokerConfig, ManualClock, Message
from rocks_timer.metrics import BrokerCollector, default_labels
from rocks_timer.metrics.disk import DiskUsage, dir_bytes, used_bytes
from tests.support.metrics_support import samples, value

T0 = 1_767_225_600_000


def _walked(root: Path) -> int:
    """The data dir's allocated bytes counted another way: os.walk and lstat."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            st = os.lstat(os.path.join(folder, name))
            total += st.st_blocks * 512
    return total


class _Seconds:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _send(broker: Broker, n: int) -> None:
    broker.send_batch([Message("orders", os.urandom(4096)) for _ in range(n)], delay_ms=60_000)


def test_dir_bytes_equal_a_walk_after_writes(tmp_path):
    with Broker.open(tmp_path / "b", BrokerConfig(), clock=ManualClock(T0)) as broker:
        before = dir_bytes(broker.path)
        _send(broker, 500)
        assert dir_bytes(broker.path) == _walked(broker.path)
        assert dir_bytes(broker.path) > before


def test_a_reading_is_kept_until_max_age_then_taken_again(tmp_path):
    seconds = _Seconds()
    usage = DiskUsage(tmp_path, max_age_s=30, now_s=seconds)
    (tmp_path / "a").write_bytes(b"x" * 8192)
    first = usage.figures()
    assert first.dir_bytes == _walked(tmp_path) and first.age_s == 0
    assert first.used_bytes == used_bytes(tmp_path)
    (tmp_path / "b").write_bytes(b"y" * 65536)
    seconds.now += 29.5
    kept = usage.figures()
    assert kept.dir_bytes == first.dir_bytes and kept.age_s == 29.5  # not walked again yet
    seconds.now += 0.5
    fresh = usage.figures()
    assert fresh.dir_bytes == _walked(tmp_path) > first.dir_bytes and fresh.age_s == 0


def test_the_scrape_shows_the_reading_and_its_age(tmp_path):
    seconds = _Seconds()
    with Broker.open(tmp_path / "b", BrokerConfig(), clock=ManualClock(T0)) as broker:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(BrokerCollector(broker, default_labels(),
                                          disk=DiskUsage(broker.path, 30, seconds)))
        found = samples(generate_latest(registry).decode())
        assert value(found, "rtimer_data_dir_bytes") == _walked(broker.path)
        assert value(found, "rtimer_disk_figures_age_seconds") == 0
        _send(broker, 500)
        seconds.now += 10
        found = samples(generate_latest(registry).decode())
        assert value(found, "rtimer_disk_figures_age_seconds") == 10
        seconds.now += 20
        found = samples(generate_latest(registry).decode())
        assert value(found, "rtimer_data_dir_bytes") == _walked(broker.path)
        assert value(found, "rtimer_disk_figures_age_seconds") == 0
