"""An `rtimer run` subprocess as the front tests start it: one wait for the line that says it
listens (each front prints its own), shared by the gRPC, remoting and metrics helpers."""
from __future__ import annotations

import re
import subprocess
import time

START_TIMEOUT_S = 30.0


def wait_listening(proc: subprocess.Popen, pattern: re.Pattern[str],
                   output: list[str]) -> re.Match[str]:
    """Read ``proc``'s output (appended to ``output``) until a line matches ``pattern``; an
    AssertionError with everything read if the process ends or START_TIMEOUT_S passes first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("rtimer run ended early:\n" + "".join(output))
        output.append(line)
        match = pattern.search(line)
        if match:
            return match
    raise AssertionError("rtimer run did not start in time:\n" + "".join(output))
