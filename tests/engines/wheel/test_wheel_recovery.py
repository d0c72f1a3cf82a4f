"""The file wheel across restarts: recovery, torn tails, downtime (ARCHITECTURE §8, §9)."""
from __future__ import annotations

import os

import pytest
from tests.support.wheel_support import DAY_MS, START_MS, env, make_env  # noqa: F401 - fixtures

from rocks_timer.config import BrokerConfig
from rocks_timer.errors import ConfigError
from rocks_timer.message_store import MessageStore
from rocks_timer.timer.wheel import WheelTimerStore
from rocks_timer.timer.wheel.layouts import UNIT_SIZE


def test_reopen_keeps_pending_and_offsets(env):  # behaviour 88
    ids = [env.send("T", env.now + 5000)[0] for _ in range(250)]
    env.run(env.now + 2000, 100)
    before = env.wheel.stats().extra
    env.reopen()
    after = env.wheel.stats().extra
    assert after["queue_offset"] == before["queue_offset"] == 250
    assert after["read_time_ms"] == before["read_time_ms"]
    env.run(env.now + 5000, 100)
    assert sorted(env.delivered_ids()) == sorted(ids)


def test_slots_due_during_downtime_are_delivered_late(env):  # behaviour 91
    ids = [env.send("T", env.now + 5000 + i * 100)[0] for i in range(20)]
    env.step()
    env.close()
    env.clock.set(START_MS + 60_000)
    env.open()
    env.step()
    assert sorted(env.delivered_ids()) == sorted(ids)


def test_lookback_is_bounded_by_the_wheel(tmp_path):  # behaviour 91
    e = make_env(tmp_path, timer_precision_ms=1000)
    e.close()
    e.clock.set(START_MS + 10 * DAY_MS)
    e.open()
    assert e.wheel.stats().extra["read_time_ms"] == START_MS + 10 * DAY_MS - 604_740 * 1000
    e.close()


def test_recovery_truncates_a_torn_tail_and_keeps_the_rest(env):  # behaviour 90
    ids = [env.send("T", env.now + 5000)[0] for _ in range(30)]
    env.wheel.maintain(env.now)
    env.close()
    segment = env.root / "wheel" / "timerlog" / f"{0:020d}"
    with open(segment, "ab") as f:
        f.write(b"\x00\x00\x00\x34" + b"\xff" * 20)  # half a unit
    env.open()
    rec = env.wheel.recovery
    assert rec["truncated_bytes"] == 24 and rec["scanned_units"] == 30
    assert segment.stat().st_size == 30 * UNIT_SIZE
    env.run(env.now + 6000, 100)
    assert sorted(env.delivered_ids()) == sorted(ids)


def test_recovery_revises_slots_from_the_log(env):  # behaviour 89
    ids = [env.send("T", env.now + 5000)[0] for _ in range(10)]
    env.wheel.maintain(env.now)
    env.wheel.wheel.put_slot(env.now + 4900, -1, 2**63 - 1)  # damage the slot
    env.reopen()
    env.run(env.now + 6000, 100)
    assert sorted(env.delivered_ids()) == sorted(ids)


def test_torn_units_past_the_wheel_are_cleared(env):
    """A slot whose units were all torn off must not keep pointing past the log."""
    keep = [env.send("T", env.now + 3000)[0] for _ in range(3)]
    env.wheel.maintain(env.now)
    lost = env.send("T", env.now + 8000)[0]
    env.wheel.maintain(env.now)
    env.close()
    segment = env.root / "wheel" / "timerlog" / f"{0:020d}"
    with open(segment, "r+b") as f:
        f.truncate(3 * UNIT_SIZE + 10)  # the fourth unit is torn
    env.open()
    assert env.wheel.recovery["cleared_slots"] == 1
    env.run(env.now + 9000, 100)
    # the torn unit's message is re-enqueued from the checkpoint's queue offset
    assert sorted(env.delivered_ids()) == sorted(keep + [lost])


def test_reopen_with_other_precision_is_refused(tmp_path):
    e = make_env(tmp_path, timer_precision_ms=1000)
    e.close()
    with pytest.raises(ConfigError):
        WheelTimerStore.open(tmp_path / "wheel", MessageStore.open(
            tmp_path / "store2", BrokerConfig(timer_precision_ms=100), e.clock),
            BrokerConfig(timer_precision_ms=100), clock=e.clock)


def test_wheel_file_is_sparse_at_p100(env):
    path = env.root / "wheel" / "timerwheel"
    assert path.stat().st_size == 2 * 6_048_000 * 32
    env.send("T", env.now + 1000)
    env.run(env.now + 3000, 1000)
    assert os.stat(path).st_blocks * 512 < 1 << 20
