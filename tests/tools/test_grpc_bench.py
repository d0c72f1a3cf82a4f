"""Smoke test: ``python -m bench.grpc`` runs end to end with tiny inputs and writes its JSON (so
it does not rot). It asserts shapes and invariants, never speed."""
from __future__ import annotations

import json

from bench import grpc as bench_grpc


def test_bench_grpc_smoke(tmp_path, capsys):
    assert bench_grpc.main(["--messages", "20", "--delays", "4", "--spread", "1",
                            "--results-dir", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "grpc.json").read_text())
    for side in ("grpc", "library"):
        assert report[side]["lateness"]["count"] == 4
        assert report[side]["lateness"]["early"] == 0
        assert report[side]["send_sync_per_s"] > 0 and report[side]["receive_ack_per_s"] > 0
    assert report["grpc"]["received"] == 20 and report["grpc"]["send_async_per_s"] > 0
    assert "gRPC / library" in capsys.readouterr().out
