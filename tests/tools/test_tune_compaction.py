"""The compaction tuning script: ranking rules (pure) and a tiny end-to-end sweep on Spark."""
from __future__ import annotations

import pandas as pd
import pytest

from spark import tune_compaction as tune


def real_disk(path):
    """``path`` if it is on a real disk, else the harness default (tmpfs /tmp on some hosts)."""
    from bench.harness import DEFAULT_WORKDIR, MEMORY_FS, filesystem_type
    return path if filesystem_type(path) not in MEMORY_FS else DEFAULT_WORKDIR


def _frame():
    return pd.DataFrame({
        "profile": ["a", "b", "a", "b"], "workload": ["w1", "w1", "w2", "w2"],
        "wa_timer": [1.0, 2.0, 1.0, 1.0], "space_amp": [2.0, 2.0, 1.0, 3.0],
        "send_per_s": [100.0, 100.0, 50.0, 100.0], "deliver_per_s": [10.0, 10.0, 10.0, 10.0],
        "first_us_unsettled": [5.0, 5.0, 5.0, 5.0]})


def test_rank_puts_the_better_profile_first_and_scores_best_as_one():
    ranked, overall = tune.rank(_frame())
    assert overall.idxmin() == "a"
    assert list(ranked["profile"])[:2] == ["a", "a"]
    w1 = ranked[ranked["workload"] == "w1"].set_index("profile")
    assert w1.loc["a", "score"] == pytest.approx(1.0)
    assert w1.loc["a", "rank"] == 1 and w1.loc["b", "rank"] == 2
    assert (ranked["mean_score"].diff().dropna() >= 0).all()


def test_pareto_front_keeps_only_unbeaten_rows():
    front = tune._pareto(_frame())
    assert list(front) == [True, False, True, False]


def test_compaction_cpu_is_read_from_the_histogram_or_reported_missing():
    class Timer:
        text = ""

        def statistics(self):
            return self.text

    class Broker:
        timer = Timer()

    Broker.timer.text = ("rocksdb.compaction.times.cpu_micros P50 : 1.0 P95 : 2.0 "
                         "P99 : 2.0 P100 : 2.0 COUNT : 3 SUM : 2500000\n")
    assert tune.compaction_cpu(Broker) == (2.5, 3)
    Broker.timer.text = "rocksdb.bytes.written COUNT : 5\n"
    assert tune.compaction_cpu(Broker) == (-1.0, -1)


def test_compaction_cpu_reads_a_real_stores_statistics(tmp_path):
    from rocks_timer import Broker, BrokerConfig
    with Broker.open(tmp_path / "d", BrokerConfig(timer_engine="rocksdb")) as broker:
        assert "rocksdb.compaction.times.cpu_micros" in broker.timer.statistics()
        seconds, compactions = tune.compaction_cpu(broker)
        assert seconds >= 0 and compactions >= 0


@pytest.mark.spark
def test_tiny_sweep_writes_a_ranking(spark, tmp_path):
    paths = tune.run(spark, ["--messages", "300", "--workloads", "short", "--profiles",
                             "default,universal", "--body-size", "128", "--out",
                             str(tmp_path), "--workdir", str(real_disk(tmp_path) / "cells")])
    ranking = pd.read_csv(paths["ranking"])
    for column in ("profile", "workload", "wa_physical", "space_amp", "send_per_s",
                   "deliver_per_s", "claim_us", "first_us_unsettled", "compaction_cpu_s",
                   "score"):
        assert column in ranking.columns
    assert sorted(ranking["profile"]) == ["default", "universal"]
    assert (ranking["wa_physical"] > 0).all() and (ranking["space_amp"] > 0).all()
    assert (ranking["claim_us"] > 0).all()
    assert ranking["mean_score"].is_monotonic_increasing
    assert paths["chart"].read_bytes()[:4] == b"\x89PNG"
    best = ranking.loc[0, "profile"]
    assert f"**{best}**" in paths["md"].read_text()
