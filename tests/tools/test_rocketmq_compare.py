"""The pieces of bench/rocketmq/compare.py that need no JVM (issue #29).

The scaled workload the real broker runs (delays divided by k), the plan file PlanSender reads
(delays, and delay levels as negative numbers), the scaled level table both the real broker and
the levels model get, which engine takes which workload, the burst cell's lateness figures, and a
model cell run the way the real wheel's scaled cell runs.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest

from bench.harness import run_cell
from bench.rocketmq.compare import (_lateness_arrays, applies, model_settings, scaled_levels,
                                    write_plan)
from bench.workloads import Workload
from rocks_timer.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevelTable


def test_a_scaled_workload_divides_each_delay_and_keeps_everything_else():
    full = list(Workload("month", 500, 64, seed=3))
    scaled = list(Workload("month", 500, 64, seed=3, delay_divisor=21_600))
    assert [op.delay_ms for op in scaled] == [max(1, op.delay_ms // 21_600) for op in full]
    assert [(op.topic, op.msg_id, op.send_ms) for op in scaled] == \
        [(op.topic, op.msg_id, op.send_ms) for op in full]
    assert max(op.delay_ms for op in scaled) < max(op.delay_ms for op in full)
    shard = Workload("month", 500, 64, seed=3, delay_divisor=21_600).shard(1, 2)
    assert [op.delay_ms for op in shard] == [op.delay_ms for op in scaled[1::2]]


def test_a_delay_divisor_below_one_is_refused():
    with pytest.raises(ValueError, match="delay_divisor"):
        Workload("short", 10, delay_divisor=0)


def test_the_scaled_level_table_divides_each_level_in_whole_seconds():
    full = DelayLevelTable.parse(DEFAULT_DELAY_LEVELS).delays_ms
    scaled = DelayLevelTable.parse(scaled_levels(60)).delays_ms
    assert len(scaled) == len(full) == 18
    assert scaled == tuple(max(1000, round(d / 60 / 1000) * 1000) for d in full)
    assert scaled[-1] == 120_000  # 2 h / 60
    assert DelayLevelTable.parse(scaled_levels(1)).delays_ms == full


def _read_plan(path):
    data = path.read_bytes()
    pos = 0

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return values

    topics = []
    for _ in range(take(">i")[0]):
        n = take(">h")[0]
        topics.append(data[pos:pos + n].decode())
        pos += n
    bodies = []
    for _ in range(take(">i")[0]):
        n = take(">i")[0]
        bodies.append(data[pos:pos + n])
        pos += n
    count = take(">q")[0]
    records = [take(">BHq") for _ in range(count)]
    assert pos == len(data)
    return topics, bodies, records


def test_the_plan_carries_scaled_delays_and_levels_as_negative_numbers(tmp_path):
    month = Workload("month", 300, 128, seed=5)
    count, payload = write_plan(tmp_path / "month.bin", month, 21_600)
    topics, bodies, records = _read_plan(tmp_path / "month.bin")
    ops = list(month)
    assert count == len(records) == 300
    assert payload == sum(128 + len(op.topic.encode()) for op in ops)
    for op, (t, b, delay) in zip(ops, records):
        assert topics[t] == op.topic and bodies[b] == month.body(op)
        assert delay == max(1, op.delay_ms // 21_600) > 0

    levels = Workload("levels", 300, 128, seed=5)
    write_plan(tmp_path / "levels.bin", levels, 60)
    _, _, records = _read_plan(tmp_path / "levels.bin")
    assert [delay for _, _, delay in records] == [-op.level for op in levels]
    assert {-d for _, _, d in records} <= set(range(1, 19))


def test_level_engines_take_only_the_level_workload_and_rtimer_takes_all():
    assert applies("rtimer", "levels") and applies("rtimer", "month")
    assert applies("levels", "levels") and applies("rocketmq-levels", "levels")
    assert not applies("levels", "month") and not applies("rocketmq-levels", "short")
    assert not applies("wheel", "levels") and not applies("rocketmq-wheel", "levels")
    assert applies("wheel-full", "day") and applies("rocketmq-rocksdb", "day")


def test_burst_lateness_counts_early_and_late_messages_from_the_due_time():
    due = 1_000_000
    store = np.array([due - 5, due + 10, due + 20, due + 30], dtype=np.int64)
    receive = store + 100
    got = _lateness_arrays(receive, store, due)
    assert got["broker_early"] == 1 and got["consumer_early"] == 0
    assert got["broker_max_ms"] == 30 and got["consumer_max_ms"] == 130
    assert got["delivered_all_after_s"] == 0.03 and got["consumed_all_after_s"] == 0.13
    assert got["broker_p50_ms"] in (10, 20)
    assert _lateness_arrays(np.array([], dtype=np.int64), np.array([], dtype=np.int64), due) == {}


def test_the_scaled_wheel_model_cell_rolls_month_messages_like_the_real_cell(tmp_path):
    settings = model_settings("wheel", "month")
    assert settings["config_changes"] == {"timer_precision_ms": 1000,
                                          "timer_roll_window_slots": 8}
    settings.pop("scale")
    row = run_cell("wheel", "month", 400, 64, workdir=tmp_path, **settings)
    assert row["complete"] and row["delivered"] == 400
    # month delays scaled by 21,600 are at most 2 min = 120 one-second slots, more than the
    # 8-slot window: nearly every message rolls several times, as in the real scaled cell
    assert row["rolls"] > 400
    assert row["sim_ms"] < 10 * 60_000


def test_spark_rows_are_set_beside_the_latest_compare_row_of_the_same_cell():
    from spark.real_check import agreement
    rows = [{"kind": "wa", "engine": "rocketmq-wheel", "workload": "short", "messages": 200,
             "wa_physical": 5.0, "rolls": 0, "run_started": "old"},
            {"kind": "wa", "engine": "rocketmq-wheel", "workload": "short", "messages": 200,
             "wa_physical": 4.0, "rolls": 0, "run_started": "new"},
            {"kind": "wa", "engine": "rtimer", "workload": "short", "messages": 200,
             "wa_physical": 2.0, "rolls": 0}]
    summary = [{"engine": "rocketmq-wheel", "workload": "short", "messages": "200",
                "wa_physical": "4.2", "rolls": "0"},
               {"engine": "rocksdb", "workload": "short", "messages": "200",
                "wa_physical": "2.1", "rolls": "0"},
               {"engine": "rocketmq-rocksdb", "workload": "day", "messages": "200",
                "wa_physical": "4.5", "rolls": "0"}]
    got = agreement(summary, rows)
    assert len(got) == 1
    assert got[0]["wa_compare"] == 4.0 and got[0]["compare_run"] == "new"
    assert got[0]["difference"] == 0.05


def test_a_model_row_counts_its_commitlog_by_parts_in_the_models_table(tmp_path):
    from bench.rocketmq.compare import models_table, rtimer_wa_cell
    row = rtimer_wa_cell("month", 300, 256, workdir=tmp_path, engine="wheel")
    assert row["layout"] == "rtimer's wheel model, scaled as the real cell" and row["scale"] == 21_600
    assert row["complete"] and row["rolls"] > 300
    commitlog = sum(row["components"][k] for k in ("cl_delivery", "cl_timer_topic", "cl_other"))
    # every message is written at least twice (timer topic, then its real topic) and rolls add
    assert commitlog > 2 * 300 * 256
    table = models_table([dict(row, kind="wa")])
    line = next(l for l in table.splitlines() if "rtimer's wheel model" in l)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1].startswith("wheel (") and cells[2] == "300"
    assert int(cells[6].replace(",", "")) == round(commitlog / 300)


def test_a_scaled_model_cell_sends_relative_delays_so_every_message_goes_through_the_timer(
        tmp_path):
    settings = model_settings("wheel", "short")
    settings.pop("scale")
    row = run_cell("wheel", "short", 300, 64, workdir=tmp_path, **settings)
    # short delays / 30 are often under the clock's 1 s step; sent as TIMER_DELAY_MS (as the real
    # plan is) each still takes the timer topic once, then its real topic once
    assert row["complete"] and row["cl_timer_topic"] > 0
    per_record = row["cl_delivery"] / 300
    assert abs(row["cl_timer_topic"] / 300 - per_record) < 0.1 * per_record
