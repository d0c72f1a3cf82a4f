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


def _key(messages: Sequence[Message]) -> tuple:
    """A send's key, (topic, message id) per message, in order (``send``'s, built without a
    generator for the one-message send of a client that sends one at a time)."""
    if len(messages) == 1:
        msg = messages[0]
        return ((msg.topic, msg.msg_id),)
    return tuple((m.topic, m.msg_id) for m in messages)


class RecentSends:
    """Deduplicates sends by (topic, message id); used from the event loop's thread only."""

    def __init__(self, capacity: int = 65_536):
        self.capacity = capacity
        self._recent: OrderedDict[tuple, asyncio.Future] = OrderedDict()
        self.duplicates = 0

    async def send(self, messages: Sequence[Message],
                   store: Callable[[Sequence[Message]], Awaitable[list]]) -> list:
        key = _key(messages)
        known = self._recent.get(key)
        if known is not None:
            self.duplicates += 1
            return await asyncio.shield(known)
        future = self._remember(key)
        try:
            results = await store(messages)
        except BaseException as exc:
            self._forget(key, future, exc)
            raise
        future.set_result(results)
        return results

    def settled(self, messages: Sequence[Message]) -> bool:
        """False while a first send of these messages is still being stored (a retry must then
        wait for it: ``send``); True otherwise."""
        known = self._recent.get(_key(messages))
        return known is None or known.done()

    def send_now(self, messages: Sequence[Message],
                 store: Callable[[Sequence[Message]], list]) -> list:
        """``send`` with a ``store`` that runs at once on this thread, for messages that are
        ``settled``: the same answers (a retry gets its first send's results or error, a new
        send is remembered, a failed one forgotten), with no coroutine and nothing to await."""
        key = _key(messages)
        known = self._recent.get(key)
        if known is not None:
            self.duplicates += 1
            return known.result()  # done (``settled``): its results, or its error raised
        future = self._remember(key)
        try:
            results = store(messages)
        except BaseException as exc:
            self._forget(key, future, exc)
            raise
        future.set_result(results)
        return results

    def _remember(self, key: tuple) -> asyncio.Future:
        """A new send under ``key``: its future, remembered (the oldest past ``capacity``
        forgotten)."""
        future = asyncio.get_running_loop().create_future()
        self._recent[key] = future
        while len(self._recent) > self.capacity:
            self._recent.popitem(last=False)
        return future

    def _forget(self, key: tuple, future: asyncio.Future, exc: BaseException) -> None:
        """A send under ``key`` failed with ``exc``: a retry is tried again, and the retries
        already waiting on ``future`` get ``exc``."""
        if self._recent.get(key) is future:
            del self._recent[key]
        future.set_exception(exc)
        future.exception()  # retrieved: waiters re-raise it, nobody else must

    async def send_many(self, groups: Sequence[Sequence[Message]],
                        store: Callable[[Sequence[Message]], Awaitable[list]]) -> list:
        """``send`` for several sends at once (the pipelined requests of one connection): the
        groups not seen before are stored by one ``store`` call with all their messages, in
        order, and each gets its slice of the results; a group already known (a retry, also one
        earlier in ``groups``) waits for its first send. Returns one entry per group: its
        results, or the exception its first send failed with. If ``store`` raises, every new
        group is forgotten (a retry is tried again) and the exception propagates."""
        outcome: list = [None] * len(groups)
        fresh, waiting = [], []
        for i, messages in enumerate(groups):
            key = _key(messages)
            known = self._recent.get(key)
            if known is not None:
                self.duplicates += 1
                waiting.append((i, known))
                continue
            fresh.append((i, key, self._remember(key), len(messages)))
        if fresh:
            try:
                results = await store([m for i, _, _, _ in fresh for m in groups[i]])
            except BaseException as exc:
                for _, key, future, _ in fresh:
                    self._forget(key, future, exc)
                raise
            at = 0
            for i, _, future, count in fresh:
                outcome[i] = results[at:at + count]
                at += count
                future.set_result(outcome[i])
        for i, known in waiting:
            try:
                outcome[i] = await asyncio.shield(known)
            except Exception as exc:  # noqa: BLE001 - the first send's failure is this one's
                outcome[i] = exc
        return outcome
