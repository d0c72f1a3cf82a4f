"""``rtimer run`` on damage (issue #30): it backs off, logs one line per failure kind per
interval instead of a traceback per step, shows the failure in ``stats`` (health), and exits
non-zero when stopped while due messages could not be delivered. The damage is real: bytes
flipped in the middle of an SST of the timer column family after a flush, and a real
``rtimer run`` subprocess."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from rocksdict import AccessType, Options, Rdict

from rocks_timer import Broker, BrokerConfig, ManualClock, Message
from rocks_timer.health import DELIVER_PUT, TIMER_STEP, Health
from tests.tools.test_cli_remote import RTIMER, ROOT

LOG_INTERVAL_MS = 1_000
DEADLINE_S = 60.0


def corrupt_timer_sst(data: Path, third: bool = True) -> Path:
    """Flip 64 bytes a third into (``third``) or at the start of (the first data block, the one
    the first key is read from) the largest SST of the ``timer`` column family (its keys start
    with the 8-byte big-endian due time; ``meta``'s are ASCII names)."""
    path = data / "timer-rocksdb"
    families = {name: Options(raw_mode=True) for name in ("timer", "meta", "corrupt")}
    db = Rdict(str(path), options=Options(raw_mode=True), column_families=families,
               access_type=AccessType.read_only())
    try:
        files = [f for f in db.live_files() if f["start_key"][:1] == b"\x00"]
    finally:
        db.close()
    sst = path / max(files, key=lambda f: f["size"])["name"].lstrip("/")
    raw = bytearray(sst.read_bytes())
    start = len(raw) // 3 if third else 16
    for at in range(start, start + 64):
        raw[at] ^= 0xFF
    sst.write_bytes(bytes(raw))
    return sst


def damaged_store(data: Path, third: bool = True) -> Path:
    with Broker.open(data, BrokerConfig()) as broker:
        broker.send_batch([Message("orders", os.urandom(200), keys=(f"k{i}",))
                           for i in range(2000)], delay_ms=1_000)
        broker.timer.flush()
    corrupt_timer_sst(data, third)
    return data


@pytest.fixture
def damaged(tmp_path) -> Path:
    return damaged_store(tmp_path / "data")


def rtimer(data: Path, *args: str, config: Path | None = None) -> subprocess.CompletedProcess:
    extra = ["--config", str(config)] if config else []
    return subprocess.run([*RTIMER, "--data-dir", str(data), *extra, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def health_of(data: Path) -> dict:
    done = rtimer(data, "stats", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["health"]


def test_run_on_a_corrupt_sst_backs_off_logs_little_shows_health_and_exits_1(damaged, tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text(f"failure_log_interval_ms = {LOG_INTERVAL_MS}\n")
    proc = subprocess.Popen([*RTIMER, "--data-dir", str(damaged), "--config", str(config),
                             "run", "--grpc-listen", "off", "--remoting-listen", "off"],
                            cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert "broker running" in proc.stdout.readline()
        started = time.monotonic()
        deadline = started + DEADLINE_S
        while True:  # through the running broker's socket
            health = health_of(damaged)
            failing = [f for f in health["failures"] if f["where"] == TIMER_STEP]
            if failing and failing[0]["count"] >= 6:
                break
            assert time.monotonic() < deadline, health
            time.sleep(0.2)
        elapsed_s = time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert health["status"] == "degraded"
    [failure] = failing
    assert failure["kind"] == "timer step: CorruptRecordError" and failure["delivery"]
    assert "000" in failure["last_error"] and ".sst" in failure["last_error"]
    assert failure["since_ms"] <= failure["last_ms"]
    # the first failure carries its traceback; the rest are counted, one line per interval
    assert err.count("Traceback") == 1, err
    lines = [line for line in err.splitlines() if line.startswith(TIMER_STEP)]
    assert lines[0].startswith("timer step failed: CorruptRecordError")
    assert len(lines) <= 2 + elapsed_s * 1000 / LOG_INTERVAL_MS, err
    assert len(lines) < failure["count"]  # fewer lines than failures: they were summed up
    # stopped while due messages could not be delivered: said, and a non-zero exit
    assert proc.returncode == 1, (out, err)
    assert "stopped while delivery was failing: timer step: CorruptRecordError" in err
    assert "stopped cleanly" not in out


def test_stats_on_a_damaged_store_answers_degraded_instead_of_an_error(tmp_path):
    # stats reads the first pending key (the lag) and counters, and walks nothing since the
    # per-topic counts became counters: damage it reads is where its first key lives
    damaged = damaged_store(tmp_path / "data", third=False)
    done = rtimer(damaged, "stats")
    assert done.returncode == 0, done.stderr
    assert "DEGRADED" in done.stdout and "CorruptRecordError" in done.stdout
    health = health_of(damaged)
    assert health["status"] == "degraded"
    assert {f["where"] for f in health["failures"]} & {"stats: timer scan", "stats: pending by topic"}


def test_a_healthy_store_reports_healthy(tmp_path):
    data = tmp_path / "data"
    with Broker.open(data, BrokerConfig()) as broker:
        broker.send(Message("orders", b"x"), delay_ms=60_000)
        assert broker.stats()["health"] == {"status": "healthy", "failures": []}


# -- the Health record itself, on a manual clock ---------------------------------------------
def test_health_backs_off_logs_once_per_interval_and_recovers(caplog):
    clock = ManualClock(1_000_000)
    health = Health(clock, log_interval_ms=60_000, max_backoff_ms=5_000)
    caplog.set_level(logging.WARNING, logger="rocks_timer.health")
    waits = []
    for _ in range(200):  # 200 failures over 200 s of simulated time
        waits.append(health.failed(TIMER_STEP, OSError(28, "No space left on device"), 100))
        clock.advance(1_000)
    assert waits[:7] == [100, 200, 400, 800, 1600, 3200, 5000] and max(waits) == 5000
    records = [r for r in caplog.records if r.name == "rocks_timer.health"]
    assert len(records) == 1 + 200 // 60  # the first, then one per 60 s
    assert records[0].exc_info is not None and all(r.exc_info is None for r in records[1:])
    assert "still failing" in records[1].getMessage()
    [failure] = health.failing(delivery_only=True)
    assert failure["count"] == 200 and failure["since_ms"] == 1_000_000
    health.failed(DELIVER_PUT, ValueError("x"))
    assert len(health.failing()) == 2
    health.recovered(TIMER_STEP)
    assert [f["where"] for f in health.failing()] == [DELIVER_PUT]
    assert "works again after 200 failure(s)" in caplog.records[-1].getMessage()
    health.recovered(DELIVER_PUT)
    assert health.as_dict() == {"status": "healthy", "failures": []}
