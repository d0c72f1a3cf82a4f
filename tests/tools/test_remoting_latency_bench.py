"""``bench.remoting_latency`` and ``bench.remoting_instructions`` do not rot: a tiny run of the
first's rtimer side (one SEND_MESSAGE_V2 at a time through the remoting front) writes its figures
and the reply's header; the second's counted path runs without valgrind."""
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


def test_instructions_child_runs_the_inline_send_path(capsys):
    """What callgrind counts (bench.remoting_instructions), run here without valgrind: each send
    is answered without waiting, with success (the child raises otherwise)."""
    from bench import remoting_instructions
    remoting_instructions.child(20)
    assert capsys.readouterr().out.split()[-1] == "20"
