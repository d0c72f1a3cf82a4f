"""``BrokerCalls``: where a front's event loop runs its broker calls.

The gRPC and remoting fronts serve from one asyncio loop each, and the loop must never wait for
the disk, so their broker calls ran on a small thread pool. For a short call the trip there and
back costs more than the call: with the Java 4.9.8 client sending one message per call to the
remoting front, the broker process used 0.27 ms of CPU per send through the pool and 0.18 ms
with the send on the loop's thread (docs/DECISIONS.md "The fronts against the real RocketMQ").
So a call the front marks short (``short``) runs on the loop's own thread when it cannot keep
the loop waiting:

- the broker's flush is ``async``: a send then waits for its CommitLog write into the page cache
  (done in the caller's thread when the CommitLog writer is idle, else at most the group being
  written), never for an fsync (``sync`` flush: every call goes to the pool);
- no call of this front is on the pool at that moment, so no call of the same front queued
  behind this one could have shared its group commit.

Everything else (``pool``, and short calls while another is on the pool) goes to the pool as
before, so concurrent sends still meet in one group commit. Used from the loop's thread only.
"""
from __future__ import annotations

import asyncio
import functools
from concurrent.futures import Executor


class BrokerCalls:
    """Runs a front's broker calls: short ones on the loop when nothing waits, others on
    ``executor``."""

    def __init__(self, executor: Executor, inline: bool):
        self.executor = executor
        self.inline = inline
        self.on_pool = 0  # calls on the pool now
        self.inlined = 0  # short calls run on the loop's thread, since start
        self.pooled = 0   # calls sent to the pool, since start

    @classmethod
    def for_broker(cls, broker, executor: Executor) -> "BrokerCalls":
        """Inline short calls only under ``async`` flush (see the module's docstring)."""
        return cls(executor, inline=broker.config.flush_disk_type == "async")

    async def short(self, fn, *args, **kwargs):
        """A call that takes microseconds to a few milliseconds and waits for no disk under
        ``async`` flush: a send, a cancel, a pop, an ack, a read of one page."""
        if self.inline and not self.on_pool:
            self.inlined += 1
            return fn(*args, **kwargs)
        return await self.pool(fn, *args, **kwargs)

    def can_run_now(self) -> bool:
        """Whether ``short`` would run its call on the loop's thread at this moment (then
        ``run_now`` does the same without a coroutine, and nothing of this front waits on the
        pool)."""
        return self.inline and not self.on_pool

    def run_now(self, fn, *args):
        """``short``'s call on the loop's thread, for a caller that checked ``can_run_now``."""
        self.inlined += 1
        return fn(*args)

    async def pool(self, fn, *args, **kwargs):
        """A call on the pool (one that may be long or wait for the disk)."""
        self.on_pool += 1
        self.pooled += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self.executor, functools.partial(fn, *args, **kwargs))
        finally:
            self.on_pool -= 1

    def stats(self) -> dict[str, int]:
        return {"inlined": self.inlined, "pooled": self.pooled}


class Resumed:
    """Continues a coroutine that was stepped by hand and yielded ``first`` (the future it waits
    for): awaiting this inside a task hands that future, and every later one, to the task, and
    passes the task's sends and throws (a cancellation) down to the coroutine. Both fronts step
    a request's coroutine on the read that brought it (most end without waiting, and then need
    no task: Python 3.12's eager tasks, by hand on 3.11) and carry on only a waiting one so."""

    __slots__ = ("coro", "first")

    def __init__(self, coro, first):
        self.coro, self.first = coro, first

    def __await__(self):
        coro, value = self.coro, self.first
        while True:
            try:
                sent = yield value
            except BaseException as exc:  # noqa: BLE001 - passed to the coroutine, as await does
                try:
                    value = coro.throw(exc)
                except StopIteration as done:
                    return done.value
                continue
            try:
                value = coro.send(sent)
            except StopIteration as done:
                return done.value


__all__ = ["BrokerCalls", "Resumed"]
