"""Smoke test: bench.levels runs end to end with a tiny workload and writes its JSON."""
from __future__ import annotations

import json

from bench import levels as bench_levels


def test_bench_levels_smoke(tmp_path, capsys):
    out = tmp_path / "levels.json"
    report = bench_levels.main(["--per-level", "40", "--levels", "2", "--out", str(out),
                                "--work-dir", str(tmp_path / "work")])
    assert json.loads(out.read_text()) == report
    assert len(report["results"]) == 6
    assert all(r["complete"] and r["delivered"] == r["messages"] for r in report["results"])
    assert "msgs/s" in capsys.readouterr().out
