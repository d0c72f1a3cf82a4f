"""``bench.remoting`` does not rot: a tiny run of its rtimer side (the Java client's per-call sends
and push consumption through the remoting front) writes its result."""
from __future__ import annotations

import json

from tests.support.remoting_support import need_java

from bench import remoting


def test_bench_remoting_smoke(tmp_path):
    need_java()
    assert remoting.main(["--messages", "40", "--skip-rocketmq", "--results-dir",
                          str(tmp_path)]) == 0
    result = json.loads((tmp_path / "remoting.json").read_text())
    rtimer = result["rtimer"]
    assert rtimer["complete"] and rtimer["consumed"] == 40
    assert rtimer["sendPerSecond"] > 0 and rtimer["consumePerSecond"] > 0
    assert result["rocketmq"] == {"measured": False, "reason": "--skip-rocketmq"}
