"""kill -9 at a random moment: every acknowledged send is delivered at least once, never early."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocks_timer.clock import ManualClock
from rocks_timer.message_store import MessageStore
from rocks_timer.timer.wheel import WheelTimerStore
from tests.faults.wheel_crash_child import CONFIG

CHILD = Path(__file__).with_name("wheel_crash_child.py")
ROOT = Path(__file__).resolve().parents[2]


def _run_child_and_kill(root: Path, seed: int, run_s: float) -> dict[str, int]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, str(CHILD), str(root), str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
        time.sleep(run_s)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err
    acked = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "ACK":  # a torn last line is not an ack
            acked[parts[1]] = int(parts[2])
    return acked


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_9_loses_no_acknowledged_message(tmp_path, seed):
    run_s = random.Random(seed).uniform(0.6, 2.0)
    acked = _run_child_and_kill(tmp_path, seed, run_s)
    assert len(acked) > 10, "the child acknowledged too little to test anything"
    clock = ManualClock(int(time.time() * 1000))
    store = MessageStore.open(tmp_path / "store", CONFIG, clock)
    wheel = WheelTimerStore.open(tmp_path / "wheel", store, CONFIG, clock=clock,
                                 timerlog_segment_size=64 * 1024)
    end = clock.now_ms() + 5_000
    while clock.now_ms() < end:
        clock.advance(100)
        now = clock.now_ms()
        wheel.maintain(now)
        records = wheel.claim_due(now, 1000, 1 << 24)
        for record in records:
            store.put_message(record.message)
        wheel.complete(records, None)
    delivered = store.pull("T", 0, 0, 1_000_000)
    got = {m.msg_id for m in delivered}
    missing = set(acked) - got
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages lost"
    for m in delivered:
        assert m.store_ms >= int(m.body), "delivered before its due time"
    assert wheel.pending_count() == 0 or wheel.stats().extra["queue_offset"] > 0
    assert wheel.check()["problems"] == []
    wheel.close()
    store.close()
