"""Sends retried with the same message id are stored once (both fronts: gRPC and remoting).

The official clients retry a failed or timed-out send at once with the same message id (three
attempts by default). The front remembers the last ``capacity`` sends by (topic, message id):
a retry of a send that is still being stored waits for it, a retry of one that succeeded gets the
same answer (the same recall handle), and a retry of one that failed is tried again. The memory
lives as long as the process: after a restart a retry is stored again (at-least-once).
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Awaitable, Callable, Sequence

from rocks_timer.message import Message


class RecentSends:
    """Deduplicates sends by (topic, message id); used from the event loop's thread only."""

    def __init__(self, capacity: int = 65_536):
        self.capacity = capacity
        self._recent: OrderedDict[tuple, asyncio.Future] = OrderedDict()
        self.duplicates = 0

    async def send(self, messages: Sequence[Message],
                   store: Callable[[Sequence[Message]], Awaitable[list]]) -> list:
        key = tuple((m.topic, m.msg_id) for m in messages)
        known = self._recent.get(key)
        if known is not None:
            self.duplicates += 1
            return await asyncio.shield(known)
        future = asyncio.get_running_loop().create_future()
        self._recent[key] = future
        while len(self._recent) > self.capacity:
            self._recent.popitem(last=False)
        try:
            results = await store(messages)
        except BaseException as exc:
            if self._recent.get(key) is future:
                del self._recent[key]
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it, nobody else must
            raise
        future.set_result(results)
        return results
