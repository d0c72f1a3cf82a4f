"""The main thread's asyncio event loop between tests.

``asyncio.run`` ends by unsetting the thread's loop, and from then on asyncio no longer makes one
for the main thread on demand. The official gRPC client sometimes creates its Telemetry stream on
the caller's (main) thread, and grpc.aio then looks the thread's loop up and fails with "There is
no current event loop in thread 'MainThread'". Test files run in random order, so a test that used
``asyncio.run`` broke, now and then, whichever client test came after it.
"""
from __future__ import annotations

import asyncio
import warnings


def restore_main_loop() -> None:
    """Give the calling thread an event loop again if ``asyncio.run`` left it without one."""
    policy = asyncio.get_event_loop_policy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            policy.get_event_loop()
        except RuntimeError:
            policy.set_event_loop(policy.new_event_loop())
