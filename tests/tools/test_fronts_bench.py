"""``bench.fronts`` does not rot: a tiny run of its rtimer side, both fronts (the official Python
client over gRPC, the Java 4.9.8 client over remoting), writes every figure it prints, the CPU
per message included. The RocketMQ side is left out here: its two JVMs and the mqadmin calls take
far longer than a smoke test may (tests/tools/test_real_rocketmq.py starts that harness)."""
from __future__ import annotations

import json

from tests.support.remoting_support import need_java

from bench import fronts


def test_bench_fronts_smoke_rtimer_side(tmp_path, capsys):
    need_java()
    assert fronts.main(["--messages", "30", "--rounds", "2", "--warm", "5", "--skip-rocketmq",
                        "--client-warm", "7", "--results-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "fronts.json").read_text())
    grpc_rounds = result["grpc"]["rounds"]["rtimer"]
    remoting_rounds = result["remoting"]["rounds"]["rtimer"]
    assert len(grpc_rounds) == len(remoting_rounds) == 2
    for figures in grpc_rounds:
        assert figures["received"] == 30
        assert figures["send_per_s"] > 0 and figures["receive_ack_per_s"] > 0
        for phase in ("send", "receive_ack"):
            assert set(figures["cpu_ms_per_message"][phase]) == {"broker", "client"}
            assert figures["cpu_ms_per_message"][phase]["client"] > 0
    for figures in remoting_rounds:
        assert figures["complete"] and figures["consumed"] == 30
        assert figures["client_warm"] == 7  # the measuring JVM's own warm-up sends
        assert set(figures["cpu_ms_per_message"]["send"]) == {"broker", "client"}
    assert "rocketmq" not in result["grpc"]["median"]
    out = capsys.readouterr().out
    assert "| gRPC (Python 5.1.2) | send, one at a time |" in out and "not measured" in out


def test_bench_grpc_servers_smoke(tmp_path):
    """``bench.grpc_servers`` (grpc.aio, grpc's sync server and the front's native transport,
    same minimal service, the official client) runs every server and writes a rate and a CPU
    figure for each."""
    from bench import grpc_servers
    assert grpc_servers.main(["--messages", "20", "--rounds", "2",
                              "--results-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "grpc_servers.json").read_text())
    for kind in ("aio", "sync", "native"):
        assert len(result["rounds"][kind]) == 2
        assert all(r["sends_per_s"] > 0 for r in result["rounds"][kind])
        assert result["median"][kind]["server_cpu_ms_per_send"] >= 0


def _round(rate_a: float, rate_b: float) -> dict:
    cpu = {"broker": 0.1, "namesrv": 0.0, "client": 0.2}
    return {"send_per_s": rate_a, "receive_ack_per_s": rate_b,
            "cpu_ms_per_message": {"send": dict(cpu), "receive_ack": dict(cpu)}}


def test_bench_fronts_summary_prints_the_last_round_ratio_beside_the_medians():
    """RocketMQ's JVM still gets faster over the rounds, so the summary prints the ratio of
    the last round (the warmest JVM) beside the ratio of the medians."""
    rounds = {"rtimer": [_round(100.0, 50.0), _round(100.0, 50.0), _round(100.0, 50.0)],
              "rocketmq": [_round(50.0, 100.0), _round(100.0, 100.0), _round(200.0, 125.0)]}
    result = {"messages": 10, "rounds": 3, "body_bytes": 1,
              "grpc": {"rounds": rounds,
                       "median": {side: fronts.round_medians(rounds[side], fronts.GRPC_RATES,
                                                             fronts.GRPC_PHASES)
                                  for side in rounds}}}
    lines = fronts.summary(result).splitlines()
    send = next(line for line in lines if "| send, one at a time |" in line)
    receive = next(line for line in lines if "| receive 32 + ack each |" in line)
    # medians 100 / 100 = 1.00; last round 100 / 200 = 0.50
    assert "| 100.0 | 100.0 | 1.00 | 0.50 |" in send
    # medians 50 / 100 = 0.50; last round 50 / 125 = 0.40
    assert "| 50.0 | 100.0 | 0.50 | 0.40 |" in receive
