"""``/metrics`` of a real ``rtimer run``: RocketMQ's names and labels, values equal to ``stats()``
and the due histogram after sends, cancels, reschedules, deliveries, consumption and restarts;
the early counter at 0; Debian's ``promtool check metrics`` on a real scrape."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.support.metrics_support import MetricsBroker, samples, series, value

STORE = {"storage_type": "local", "storage_medium": "disk"}
ROCKETMQ_NAMES = (
    "rocketmq_timer_enqueue_lag", "rocketmq_timer_enqueue_latency", "rocketmq_timer_dequeue_lag",
    "rocketmq_timer_dequeue_latency", "rocketmq_timer_message_snapshot",
    "rocketmq_timer_enqueue_total", "rocketmq_delay_message_latency_bucket",
    "rocketmq_delay_message_latency_sum", "rocketmq_delay_message_latency_count",
    "rocketmq_storage_size")


def _names(found) -> set[str]:
    return {name for name, _ in found}


def _send(broker: MetricsBroker, topic: str, delay: str, count: int = 1, **extra: str) -> list:
    args = ["send", topic, f"body of {topic}", "--count", str(count)]
    args += ["--delay", delay] if delay else []
    for key, val in extra.items():
        args += [f"--{key}", val]
    return broker.cli_json(*args)


def _check_against_stats(found, stats) -> None:
    """Every value the scrape shares with ``stats()`` is equal to it."""
    assert value(found, "rocketmq_timer_enqueue_total", **STORE) == stats["sent"]["timer"]
    assert series(found, "rocketmq_timer_dequeue_total", "topic") == \
        stats["deliveries"]["by_topic"]
    assert series(found, "rocketmq_timing_messages", "topic") == stats["pending_by_topic"]
    assert value(found, "rtimer_timing_messages_complete") == 1
    assert value(found, "rtimer_pending_messages") == stats["pending"]
    assert series(found, "rtimer_pending_by_due", "bucket") == stats["due"]["buckets"]
    assert value(found, "rocketmq_timer_dequeue_lag", **STORE) == stats["due"]["buckets"]["now"]
    assert value(found, "rocketmq_timer_dequeue_latency", **STORE) == stats["lag_ms"] == 0
    assert value(found, "rtimer_timer_delivered_total") == stats["delivered"]
    assert value(found, "rtimer_cancelled_total") == stats["cancelled"]
    assert value(found, "rtimer_rescheduled_total") == stats["rescheduled"]
    assert value(found, "rtimer_early_deliveries_total") == stats["deliveries"]["early"] == 0
    assert value(found, "rocketmq_messages_in_total", message_type="normal") == \
        stats["sent"]["immediate"]
    assert value(found, "rocketmq_messages_in_total", message_type="delay") == \
        stats["sent"]["level"] + stats["sent"]["timer"]
    assert value(found, "rocketmq_messages_out_total", consume_mode="pull") == \
        stats["commitlog"]["messages_read"]
    late = stats["deliveries"]["lateness_ms"]
    assert value(found, "rtimer_delivery_lateness_seconds_count") == late["count"]
    assert value(found, "rtimer_delivery_lateness_seconds_sum") == pytest.approx(
        late["sum"] / 1000, abs=1e-9)
    buckets = series(found, "rtimer_delivery_lateness_seconds_bucket", "le")
    assert buckets["+Inf"] == late["count"]
    for i, bound in enumerate(late["bounds"]):
        assert buckets[repr(bound / 1000)] == sum(late["counts"][:i + 1])
    delays = stats["send_delays_ms"]
    assert value(found, "rocketmq_delay_message_latency_count", **STORE) == delays["count"] \
        == stats["sent"]["timer"]
    assert value(found, "rocketmq_delay_message_latency_sum", **STORE) == pytest.approx(
        delays["sum"] / 1000, abs=1e-9)
    written = series(found, "rtimer_bytes_written_total", "component")
    assert written["commitlog"] == stats["commitlog"]["commitlog_bytes"]
    assert written["index_wal"] == stats["timer"]["bytes_written"]["wal"]
    assert written["value_segments"] == stats["timer"]["bytes_written"]["vlog"]
    assert value(found, "rtimer_value_segment_live_fraction") == \
        stats["timer"]["vlog_live_fraction"]
    assert value(found, "rtimer_set_aside_messages") == stats["timer"]["corrupt"] == 0
    assert value(found, "rtimer_store_healthy") == 1
    # the snapshot by due bound adds up to the pending count (no 24 h cap)
    assert sum(series(found, "rocketmq_timer_message_snapshot", "timer_bound_s").values()) == \
        stats["pending"]


def test_scrape_equals_stats_through_sends_cancels_reschedules_deliveries_and_restarts(tmp_path):
    broker = MetricsBroker(tmp_path / "data", "--grpc-listen", "off",
                           "--metrics-label", "cluster=test-cluster").start()
    try:
        status, kind, body = broker.get("/metrics")
        assert status == 200 and kind.startswith("text/plain")
        found = samples(body.decode())
        assert _names(found) >= set(ROCKETMQ_NAMES)
        assert all(dict(labels).get("storage_type") == "local"
                   for name, labels in found if name.startswith("rocketmq_timer"))
        assert "cluster=\"test-cluster\"" in body.decode()
        assert value(found, "rocketmq_timer_enqueue_total", **STORE) == 0

        _send(broker, "orders", "300ms", count=3)
        later = _send(broker, "orders", "2h", count=4)
        _send(broker, "billing", "2d", count=2)
        _send(broker, "audit", "")  # stored at once
        _send(broker, "audit", "", level="1")  # on a delay level
        assert broker.cli("cancel", later[0]["handle"])
        broker.cli("reschedule", later[1]["handle"], "--delay", "20m")
        stats = broker.wait_for(lambda s: s["delivered"] == 3 and s["in_flight"] == 0,
                                "three deliveries")
        broker.cli("consume", "orders", "--group", "billing-svc", "--max", "10")
        stats = broker.stats()
        found = samples(broker.scrape())
        _check_against_stats(found, stats)
        assert stats["pending"] == 5 and stats["pending_by_topic"] == {"billing": 2, "orders": 3}
        assert series(found, "rocketmq_timer_dequeue_total", "topic") == {"orders": 3}
        snapshot = series(found, "rocketmq_timer_message_snapshot", "timer_bound_s")
        # 20 min in [900 s, 3600 s), 2 h in [3600 s, 14400 s), 2 d in [86400 s, 604800 s)
        assert {b: n for b, n in snapshot.items() if n} == {"3600": 1, "14400": 2, "604800": 2}
        assert value(found, "rocketmq_messages_out_total", consume_mode="pull") == 3
        lags = {(dict(ls)["topic"], dict(ls)["consumer_group"]): v for (n, ls), v in found.items()
                if n == "rocketmq_consumer_lag_messages"}
        assert lags == {("orders", "billing-svc"): 0}
        assert value(found, "rocketmq_delay_message_latency_bucket", le="60.0", **STORE) == 3
        assert value(found, "rocketmq_delay_message_latency_bucket", le="+Inf", **STORE) == 9
        requests = series(found, "rtimer_front_requests_total", "method")
        assert requests["send"] == 5 and requests["cancel"] == 1 and requests["stats"] >= 2
        assert value(found, "rtimer_previous_stop_clean") == 1  # a fresh data dir

        # a clean restart: process counters start over, stored figures do not
        assert "stopped cleanly" in broker.stop()
        broker = MetricsBroker(tmp_path / "data").start()
        stats = broker.stats()
        found = samples(broker.scrape())
        _check_against_stats(found, stats)
        assert series(found, "rocketmq_timing_messages", "topic") == {"billing": 2, "orders": 3}
        assert value(found, "rocketmq_timer_enqueue_total", **STORE) == 0
        assert value(found, "rtimer_previous_stop_clean") == 1
        assert value(found, "rtimer_recovery_seconds") == 0

        # kill -9: the next open is a recovery, and says how long it took
        broker.kill9()
        broker = MetricsBroker(tmp_path / "data").start()
        stats = broker.stats()
        found = samples(broker.scrape())
        _check_against_stats(found, stats)
        assert stats["open"]["previous_stop_clean"] is False
        assert value(found, "rtimer_previous_stop_clean") == 0
        assert value(found, "rtimer_recovery_seconds") == stats["open"]["open_ms"] / 1000 > 0
        assert series(found, "rocketmq_timing_messages", "topic") == {"billing": 2, "orders": 3}
    finally:
        broker.stop()


def test_the_endpoint_answers_only_what_it_serves(tmp_path):
    broker = MetricsBroker(tmp_path / "data").start()
    try:
        status, kind, body = broker.get("/")
        assert status == 200 and kind.startswith("text/html") and b"dashboard.js" in body
        import urllib.error
        with pytest.raises(urllib.error.HTTPError) as err:
            broker.get("/nothing-here")
        assert err.value.code == 404
    finally:
        broker.stop()


def _promtool() -> str | None:
    found = shutil.which("promtool")
    if found is None and os.environ.get("CI") == "true":
        pytest.fail("promtool is missing under CI=true: `make prometheus` installs Debian's "
                    "prometheus package (as root)")
    return found


def test_promtool_checks_a_real_scrape(tmp_path):
    promtool = _promtool()
    if promtool is None:
        pytest.skip("promtool is not installed (Debian's prometheus package; `make prometheus` "
                    "installs it as root)")
    broker = MetricsBroker(tmp_path / "data").start()
    try:
        _send(broker, "orders", "200ms", count=2)
        _send(broker, "orders", "1h")
        broker.wait_for(lambda s: s["delivered"] == 2, "two deliveries")
        text = broker.scrape()
    finally:
        broker.stop()
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
