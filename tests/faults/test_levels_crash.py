"""kill -9 at a random moment: every acknowledged level message is delivered at least once."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from legacy_levels.service import ScheduleMessageService
from tests.support.levels_support import open_store, pull_all
from rocks_timer.clock import ManualClock, SystemClock

CHILD = Path(__file__).with_name("levels_crash_child.py")
COUNT = 1_500


def run_and_kill(root: Path, mode: str, kill_after_s: float) -> list[str]:
    proc = subprocess.Popen([sys.executable, str(CHILD), str(root), mode, str(COUNT)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    started = time.monotonic()
    while not any(line.startswith("STARTED") for line in list(lines)):
        if proc.poll() is not None or time.monotonic() - started > 20:
            proc.kill()
            raise AssertionError(f"child did not start: {proc.stderr.read()}")
        time.sleep(0.01)
    time.sleep(kill_after_s)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    reader.join(5)
    assert proc.returncode == -signal.SIGKILL
    return [line.split()[1] for line in lines if line.startswith("ACK ") and line.endswith("\n")]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_kill9_loses_no_acknowledged_message(tmp_path, mode):
    seed = int(os.environ.get("LEVELS_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    kill_after_s = rng.uniform(0.3, 2.5)  # during parking, during delivery, or after both
    acked = run_and_kill(tmp_path, mode, kill_after_s)
    assert acked, f"seed {seed}: the child acknowledged nothing before the kill"

    # restart on the same data dir; the clock is past every due time
    clock = ManualClock(SystemClock().now_ms() + 5_000)
    store, cfg = open_store(tmp_path, clock, message_delay_level="1s 2s",
                            enable_schedule_async_deliver=mode == "async")
    service = ScheduleMessageService(tmp_path, store, cfg, clock)
    try:
        service.load()
        for _ in range(100):
            service.tick()
            clock.advance(100)
            lags = [service.stats()["levels"][level]["lag"] for level in (1, 2)]
            if lags == [0, 0] and not any(service.stats()["pending"].values()):
                break
        delivered = [m.msg_id for m in pull_all(store, "crash")]
    finally:
        service.close()
        store.close()
    missing = set(acked) - set(delivered)
    duplicates = len(delivered) - len(set(delivered))
    print(f"\n[levels kill -9 {mode}] seed={seed} kill_after={kill_after_s:.2f}s "
          f"acked={len(acked)} delivered={len(delivered)} unique={len(set(delivered))} "
          f"duplicates={duplicates} offset_file={service.offset_file_source}")
    assert not missing, f"seed {seed}: {len(missing)} acknowledged messages lost"
