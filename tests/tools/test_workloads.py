"""The seeded workloads: determinism, sharding, delay ranges, and one measured harness cell."""
from __future__ import annotations

import pytest

from bench.harness import (COLUMNS, DEFAULT_WORKDIR, MEMORY_FS, cell_config, disk_usage,
                           filesystem_type, run_cell)
from bench.workloads import (CANCEL_FRACTION, DAY_MS, LEVEL_DELAYS_MS, SPECS, WORKLOAD_NAMES,
                             Workload, fits_levels, workload)


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_same_seed_same_operations_other_seed_differs(name):
    assert list(workload(name, 300, seed=3)) == list(workload(name, 300, seed=3))
    assert list(workload(name, 300, seed=3)) != list(workload(name, 300, seed=4))


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
@pytest.mark.parametrize("shards", [1, 2, 3, 7])
def test_shards_cover_the_workload_exactly_once(name, shards):
    whole = list(workload(name, 250, seed=11))
    parts = [list(workload(name, 250, seed=11).shard(i, shards)) for i in range(shards)]
    assert sum(len(p) for p in parts) == len(whole)
    for i, part in enumerate(parts):
        assert len(part) == len(workload(name, 250, seed=11).shard(i, shards))
    merged = sorted((op for part in parts for op in part), key=lambda op: op.index)
    assert merged == whole
    assert len({op.msg_id for op in whole}) == len(whole)


def test_sharding_a_shard_or_a_bad_shard_is_refused():
    with pytest.raises(ValueError):
        workload("short", 10).shard(0, 2).shard(0, 2)
    with pytest.raises(ValueError):
        workload("short", 10).shard(2, 2)
    with pytest.raises(ValueError):
        workload("nope", 10)


@pytest.mark.parametrize("name", ["short", "day", "month", "cancel", "levels"])
def test_delays_stay_in_the_named_range(name):
    spec = SPECS[name]
    ops = list(workload(name, 2_000))
    assert all(spec.low_ms <= op.delay_ms <= spec.high_ms for op in ops)
    # the draws spread over the range, not a corner of it
    span = spec.high_ms - spec.low_ms
    assert max(op.delay_ms for op in ops) - min(op.delay_ms for op in ops) > 0.9 * span


def test_day_fits_the_roll_window_and_month_needs_a_long_max_delay():
    assert max(op.delay_ms for op in workload("day", 2_000)) <= 2 * DAY_MS
    assert min(op.delay_ms for op in workload("month", 2_000)) >= 3 * DAY_MS
    assert SPECS["month"].max_delay_sec >= 31 * 86_400
    assert cell_config("wheel", "month").timer_max_delay_sec >= 31 * 86_400


def test_burst_is_due_within_one_second_after_the_sends():
    w = workload("burst", 3_000)
    dues = [op.due_ms for op in w]
    assert max(dues) - min(dues) < 1_000
    assert min(dues) > w.send_window_ms


def test_cancel_fraction_and_levels_shape():
    ops = list(workload("cancel", 5_000))
    share = sum(op.cancel for op in ops) / len(ops)
    assert abs(share - CANCEL_FRACTION) < 0.03
    levels = list(workload("levels", 2_000))
    assert {op.level for op in levels} == set(range(1, 19))
    assert all(op.delay_ms == LEVEL_DELAYS_MS[op.level - 1] for op in levels)
    assert fits_levels("levels") and not fits_levels("short")
    with pytest.raises(ValueError):
        cell_config("levels", "short")


def test_body_sizes_and_send_rate():
    w = Workload("short", 10, body_size=128, rate_per_s=5)
    ops = list(w)
    assert all(len(w.body(op)) == 128 for op in ops)
    assert [op.send_ms for op in ops] == [i * 200 for i in range(10)]


def test_filesystem_type_and_disk_usage(tmp_path):
    assert filesystem_type(DEFAULT_WORKDIR.parent) not in MEMORY_FS
    assert filesystem_type("/proc") == "proc"
    (tmp_path / "f").write_bytes(b"x" * 10_000)
    assert disk_usage(tmp_path) >= 10_000


@pytest.mark.parametrize("engine,name", [("rocksdb", "cancel"), ("wheel", "short"),
                                         ("levels", "levels")])
def test_run_cell_delivers_everything_and_counts_bytes(tmp_path, engine, name):
    workdir = tmp_path if filesystem_type(tmp_path) not in MEMORY_FS else None
    row = run_cell(engine, name, 300, body_size=128, workdir=workdir)
    assert set(COLUMNS) <= set(row)
    assert row["complete"] and row["delivered"] == row["sent"] - row["cancelled"]
    assert row["sent"] == 300 and (row["cancelled"] > 0) == (name == "cancel")
    assert row["payload_bytes"] > 300 * 128
    assert row["physical_bytes"] > 0 and row["wa_physical"] > 0
    assert row["wa_logical"] >= row["wa_timer"] > 0
    assert row["cl_delivery"] > row["delivered"] * 128
    assert row["peak_disk_bytes"] > 0
    if engine == "rocksdb":
        assert row["rocks_wal"] > 0
    if engine == "wheel":
        assert row["cl_timer_topic"] > 0 and row["wheel_timerlog"] > 0
    if engine == "levels":
        assert row["cl_level_topic"] > 0
    assert not any(p.name.startswith(f"{engine}-{name}-") and row["workdir"] == str(p)
                   for p in (workdir or DEFAULT_WORKDIR).iterdir())  # the cell cleaned up
