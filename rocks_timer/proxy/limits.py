"""``PeerLimits``: how many streams and calls one client connection may hold at once.

The server's own bound (``maximum_concurrent_rpcs``) is shared by every client, so one client
holding it, for instance with 1,000 idle Telemetry streams on one channel, locked every other
client out. Each connection (gRPC's ``context.peer()``: address and port) now gets at most
``max_streams`` open Telemetry streams and ``max_calls`` other calls in progress (long polls
included); the excess is answered at once, TOO_MANY_REQUESTS (a RocketMQ status) for calls and
RESOURCE_EXHAUSTED for a stream, and the connection's other work goes on. The two limits
together stay well under the server's, so others always find room.

Counted on the front's event loop only (one thread): no lock.
"""
from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from typing import Iterator

STREAMS, CALLS = "streams", "calls"
MAX_STREAMS_PER_PEER = 16  # an official client opens one Telemetry stream per endpoint
MAX_CALLS_PER_PEER = 128


class PeerLimits:
    """Counts the streams and calls each client connection holds; refuses past the limits."""

    def __init__(self, max_streams: int = MAX_STREAMS_PER_PEER,
                 max_calls: int = MAX_CALLS_PER_PEER):
        self.limits = {STREAMS: max_streams, CALLS: max_calls}
        self._held: dict[str, Counter[str]] = {STREAMS: Counter(), CALLS: Counter()}
        self.refused: Counter[str] = Counter()  # by kind, since start

    def take(self, peer: str, kind: str) -> bool:
        """Hold one ``kind`` slot for ``peer``: False (holding nothing, the refusal counted)
        when the peer holds its limit already. Each True is matched by one :meth:`release`."""
        held = self._held[kind]
        count = held.get(peer, 0)
        if count >= self.limits[kind]:
            self.refused[kind] += 1
            return False
        held[peer] = count + 1
        return True

    def release(self, peer: str, kind: str) -> None:
        held = self._held[kind]
        count = held[peer] - 1
        if count:
            held[peer] = count
        else:
            del held[peer]

    @contextmanager
    def hold(self, peer: str, kind: str | None) -> Iterator[bool]:
        """A block during which ``peer`` holds one ``kind`` slot; yields False (and holds
        nothing) when the peer already holds its limit. ``kind`` None: not counted. (The
        unary handlers call :meth:`take` and :meth:`release` themselves: a generator-based
        context manager costs more than the call it guards.)"""
        if kind is None:
            yield True
            return
        if not self.take(peer, kind):
            yield False
            return
        try:
            yield True
        finally:
            self.release(peer, kind)

    def refusal(self, kind: str) -> str:
        return (f"this connection already holds {self.limits[kind]} {kind} (the limit per "
                "client connection); finish some, or open another connection")

    def stats(self) -> dict[str, int]:
        """Connections holding something, what they hold, and the refusals so far. Read from
        other threads: each table is copied first (one C-level copy under the GIL)."""
        streams, calls = dict(self._held[STREAMS]), dict(self._held[CALLS])
        refused = dict(self.refused)
        return {"peers": len(streams.keys() | calls.keys()), "streams": sum(streams.values()),
                "calls": sum(calls.values()), "refused_streams": refused.get(STREAMS, 0),
                "refused_calls": refused.get(CALLS, 0)}
