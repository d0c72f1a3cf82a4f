"""GET_BROKER_RUNTIME_INFO (28): the broker's figures as RocketMQ's dashboard reads them.

The body is a ``KVTable`` (``{"table": {name: string value}}``). The timer fields keep RocketMQ's
names with rtimer's meaning:

- ``timerReadBehind``: seconds between now and the due time of the oldest pending timer message
  that is already due (0 when the deliverer keeps up);
- ``timerOffsetBehind``: timer messages taken from the timer store and not yet in the CommitLog
  (rtimer enqueues at send time, so it has no enqueue backlog; this is its delivery backlog);
- ``timerCongestNum``: pending timer messages already due;
- ``timerEnqueueTps`` / ``timerDequeueTps``: timer messages scheduled / delivered per second over
  the last minute, from the broker's counters sampled once a second.
"""
from __future__ import annotations

import json
from collections import deque

from rocks_timer.remoting.codes import Response
from rocks_timer.remoting.command import RemotingCommand

WINDOW_S = 60


class RateSampler:
    """Samples (time, scheduled, delivered) once a second; rates over the window."""

    def __init__(self, broker):
        self.broker = broker
        self.samples: deque[tuple[float, int, int]] = deque(maxlen=WINDOW_S + 1)

    def sample(self, now_s: float) -> None:
        self.samples.append((now_s, self.broker.sent["timer"], self.broker.delivered))

    def rates(self) -> tuple[float, float]:
        if len(self.samples) < 2:
            return 0.0, 0.0
        (t0, s0, d0), (t1, s1, d1) = self.samples[0], self.samples[-1]
        span = max(t1 - t0, 1e-9)
        return (s1 - s0) / span, (d1 - d0) / span


class AdminHandlers:
    """Mixed into ``RemotingService``: the admin side."""

    async def runtime_info(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        stats = await self.call(self.broker.stats)
        enqueue_tps, dequeue_tps = self.rates.rates()
        sent = stats["sent"]
        table = {
            "brokerVersionDesc": "rtimer (RocketMQ 4.x remoting)",
            "brokerVersion": str(cmd.version),
            "timerEngine": stats["engine"],
            "timerPending": stats["pending"],
            "timerReadBehind": stats["lag_ms"] // 1000,
            "timerOffsetBehind": stats["in_flight"],
            "timerCongestNum": stats["due"]["buckets"].get("now", 0),
            "timerEnqueueTps": f"{enqueue_tps:.2f}",
            "timerDequeueTps": f"{dequeue_tps:.2f}",
            "msgPutTotalTodayNow": sum(sent.values()),
            "commitLogMinOffset": stats["commitlog"]["min_offset"],
            "commitLogMaxOffset": stats["commitlog"]["max_offset"],
            "remotingConnections": len(self.connections),
            "remotingConsumerGroups": self.clients.group_count(),
            "remotingDuplicateSends": self.recent.duplicates,
        }
        body = json.dumps({"table": {k: str(v) for k, v in table.items()}}).encode("utf-8")
        return cmd.response(Response.SUCCESS, body=body)


__all__ = ["AdminHandlers", "RateSampler"]
