"""End-to-end: a tiny write-amplification comparison and the scale model on the suite's Spark."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from spark import wa_compare, wa_model


def real_disk(path):
    """``path`` if it is on a real disk, else the harness default (tmpfs /tmp on some hosts)."""
    from bench.harness import DEFAULT_WORKDIR, MEMORY_FS, filesystem_type
    return path if filesystem_type(path) not in MEMORY_FS else DEFAULT_WORKDIR


pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def wa_run(spark, tmp_path_factory):
    out = tmp_path_factory.mktemp("wa")
    args = wa_compare.build_parser().parse_args(
        ["--messages", "300", "--workloads", "short,burst", "--engines", "rocksdb,wheel",
         "--profiles", "default,vlog", "--body-size", "128", "--partitions", "1", "--out", str(out),
         "--workdir", str(real_disk(out) / "cells")])
    return wa_compare.run(spark, args)


def test_wa_compare_writes_every_output(spark, wa_run):
    for name in ("summary_csv", "summary_md", "chart"):
        assert wa_run[name].is_file() and wa_run[name].stat().st_size > 0
    assert wa_run["chart"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = pd.read_csv(wa_run["summary_csv"])
    for column in ("engine", "workload", "profile", "messages", "payload_bytes",
                   "physical_bytes", "wa_physical", "wa_logical", "peak_disk_bytes", "seconds"):
        assert column in summary.columns
    assert sorted(zip(summary["engine"], summary["workload"], summary["profile"])) == [
        ("rocksdb", "burst", "default"), ("rocksdb", "burst", "vlog"),
        ("rocksdb", "short", "default"), ("rocksdb", "short", "vlog"),
        ("wheel", "burst", "-"), ("wheel", "short", "-")]
    assert (summary["messages"] == 300).all() and summary["complete"].all()
    assert (summary["wa_physical"] > 0).all() and (summary["wa_logical"] > 0).all()
    assert (summary["wa_timer"] > 0).all()
    # the wheel writes every timer message into the CommitLog once more than RocksDB does
    by = summary.set_index(["engine", "workload", "profile"])
    assert by.loc[("wheel", "short", "-"), "cl_timer_topic"] > 0
    assert by.loc[("rocksdb", "short", "default"), "cl_timer_topic"] == 0
    # vlog bodies go to value segments (128 B bodies: above the inline threshold once encoded)
    assert by.loc[("rocksdb", "short", "vlog"), "rocks_vlog"] > 0
    assert by.loc[("rocksdb", "short", "default"), "rocks_vlog"] == 0
    cells = spark.read.parquet(str(wa_run["cells"]))
    assert cells.count() == 6
    md = wa_run["summary_md"].read_text()
    assert md.count("| rocksdb |") >= 2 and "wa_physical" in md


def test_wa_compare_shards_add_up(spark, tmp_path):
    args = wa_compare.build_parser().parse_args(
        ["--messages", "200", "--workloads", "burst", "--engines", "rocksdb",
         "--body-size", "128", "--partitions", "2", "--out", str(tmp_path),
         "--workdir", str(real_disk(tmp_path) / "cells")])
    paths = wa_compare.run(spark, args)
    rows = spark.read.parquet(str(paths["cells"])).collect()
    assert sorted(r["shard"] for r in rows) == [0, 1]
    assert sum(r["sent"] for r in rows) == 200
    summary = pd.read_csv(paths["summary_csv"])
    assert len(summary) == 1 and summary.loc[0, "messages"] == 200
    assert summary.loc[0, "payload_bytes"] == sum(r["payload_bytes"] for r in rows)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        wa_compare.check_args(wa_compare.build_parser().parse_args(
            ["--workloads", "nope", "--out", "x"]))
    with pytest.raises(SystemExit):
        wa_compare.main(["--engines", "rocksdb", "--workloads", "short", "--messages", "0",
                         "--out", "x"])


def test_model_validates_and_projects(spark, wa_run):
    paths = wa_model.run(spark, ["--cells", str(wa_run["cells"]), "--day-messages", "200000",
                                 "--mix", "short=0.7,burst=0.3"])
    result = json.loads(paths["json"].read_text())
    assert len(result["validation"]) == 6
    assert all(abs(v["error"]) < 1.0 for v in result["validation"])
    engines = result["projection"]["engines"]
    assert set(engines) == {"rocksdb", "vlog", "wheel"}  # levels only for a level-shaped mix
    table = result["projection"]["theta_table"]
    assert [row["theta"] for row in table] == list(wa_model.THETAS)
    assert all(row["space_amp"] >= 1.0 and row["wa_logical"] > 1.0 for row in table)
    for figures in engines.values():
        assert figures["logical_bytes_per_day"] > 200_000 * 128
        assert figures["disk_bytes"] > 0
    assert result["projection"]["messages_per_day"] == 200_000
    assert "max |error|" in paths["md"].read_text()


def test_wheel_roll_rule_matches_its_closed_form(spark):
    from pyspark.sql import functions as F
    delays = [0, 1, wa_model.ROLL_WINDOW_MS - 1, wa_model.ROLL_WINDOW_MS,
              4 * wa_model.ROLL_WINDOW_MS // 3, 30 * 86_400_000, 17 * 86_400_000 + 5]
    df = spark.createDataFrame([(float(d),) for d in delays], ["d"])
    got = [r[0] for r in df.select(wa_model.rolls_column(F.col("d"))).collect()]
    assert got == [wa_model.rolls_for(d) for d in delays]
    assert wa_model.rolls_for(30 * 86_400_000) >= 14


def test_class_model_relocates_only_segments_cancels_emptied():
    day = 86_400_000
    classes = {wa_model.delay_class(3 * day): (1000, 0), wa_model.delay_class(60_000): (1000, 900)}
    table = wa_model.class_table(classes, rate=1000, payload=1100, theta=0.25)
    assert [c["relocated"] for c in table] == [True, False]  # the 90%-cancelled class only
    assert abs(wa_model.relocated_share(table) - 0.05) < 1e-9  # half the messages x 10% live
    assert not any(c["relocated"] for c in wa_model.class_table(classes, 1000, 1100, 0.0))
