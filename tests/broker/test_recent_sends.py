"""``RecentSends.send_now`` (the store run at once, no coroutine) against ``send`` (awaited): the
same answers for a new send, a retry of a stored one, and a retry of one that failed; and
``settled`` is False only while a first send is still being stored."""
from __future__ import annotations

import asyncio

import pytest

from rocks_timer.message import Message
from rocks_timer.recent_sends import RecentSends


def msg(n: int) -> Message:
    return Message(topic="T", body=b"x", msg_id=f"{n:032X}")


class Store:
    """Results are the store's call number; ``fail`` makes the next call raise."""

    def __init__(self):
        self.calls = 0
        self.fail = False

    def __call__(self, messages):
        self.calls += 1
        if self.fail:
            self.fail = False
            raise OSError("disk")
        return [self.calls] * len(messages)

    async def awaited(self, messages):
        await asyncio.sleep(0)
        return self(messages)


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("mode", ["now", "awaited"])
def test_a_retry_gets_the_first_answer_and_a_failed_send_is_tried_again(mode):
    async def scenario():
        recent, store = RecentSends(), Store()

        async def send(messages):
            if mode == "now":
                return recent.send_now(messages, store)
            return await recent.send(messages, store.awaited)
        first = await send([msg(1)])
        again = await send([msg(1)])
        store.fail = True
        with pytest.raises(OSError):
            await send([msg(2)])
        retried = await send([msg(2)])
        return first, again, retried, store.calls, recent.duplicates
    assert run(scenario()) == ([1], [1], [3], 3, 1)


def test_settled_is_false_only_while_a_first_send_is_stored():
    async def scenario():
        recent, store, gate = RecentSends(), Store(), asyncio.Event()

        async def slow(messages):
            await gate.wait()
            return store(messages)
        first = asyncio.ensure_future(recent.send([msg(1)], slow))
        await asyncio.sleep(0)
        during = (recent.settled([msg(1)]), recent.settled([msg(2)]))
        gate.set()
        await first
        after = recent.settled([msg(1)])
        return during, after, recent.send_now([msg(1)], store), store.calls
    assert run(scenario()) == ((False, True), True, [1], 1)


def test_the_memory_is_bounded_for_sends_stored_at_once():
    async def scenario():
        recent, store = RecentSends(capacity=3), Store()
        for n in range(5):
            recent.send_now([msg(n)], store)
        recent.send_now([msg(0)], store)  # forgotten: stored again
        return store.calls, recent.duplicates
    assert run(scenario()) == (6, 0)
