"""``bench.remoting_latency`` does not rot: a tiny run of its rtimer side (one SEND_MESSAGE_V2 at a
time through the remoting front) writes its figures and the reply's header."""
from __future__ import annotations

import json

from bench import remoting_latency


def test_latency_smoke(tmp_path):
    assert remoting_latency.main(["--messages", "30", "--rounds", "2", "--warm", "5",
                                  "--skip-rocketmq", "--results-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "remoting_latency.json").read_text())
    rtimer = result["sides"]["rtimer"]
    assert len(rtimer["rounds"]) == 2 and "rocketmq" not in result["sides"]
    assert 0 < rtimer["p50_us"] <= rtimer["p99_us"]
    assert rtimer["cpu_ms_per_request"] >= 0
    reply = rtimer["reply"]
    assert reply["serialize_type"] == 0 and json.loads(reply["header"])["code"] == 0
