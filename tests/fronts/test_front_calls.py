"""Where a front's broker calls run (``BrokerCalls``): a short call on the event loop's own thread
only under ``async`` flush and while no call of the front is on the pool; otherwise on the pool,
so that concurrent sends still share a group commit and a sync-flush send never holds the loop
for an fsync."""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from rocks_timer import Message
from rocks_timer.front_calls import BrokerCalls


def where() -> int:
    return threading.get_ident()


@pytest.mark.parametrize("flush, on_loop", [("async", True), ("sync", False)])
def test_a_short_send_runs_on_the_loop_only_under_async_flush(make_broker, flush, on_loop):
    broker = make_broker("memory", flush_disk_type=flush)

    async def run():
        with ThreadPoolExecutor(2) as pool:
            calls = BrokerCalls.for_broker(broker, pool)
            sent = await calls.short(broker.send_batch, [Message(topic="t", body=b"x")])
            ran = await calls.short(where)
            return sent, ran == threading.get_ident(), calls.stats()

    sent, ran_on_loop, stats = asyncio.run(run())
    assert len(sent) == 1 and broker.pull("t", 0, 0, 10)[0].body == b"x"
    assert ran_on_loop is on_loop
    assert stats == ({"inlined": 2, "pooled": 0} if on_loop else {"inlined": 0, "pooled": 2})


def test_a_short_call_goes_to_the_pool_while_another_call_is_there():
    release = threading.Event()

    async def run():
        with ThreadPoolExecutor(2) as pool:
            calls = BrokerCalls(pool, inline=True)
            held = asyncio.ensure_future(calls.pool(release.wait, 10))
            await asyncio.sleep(0)  # the held call is on the pool now
            assert calls.on_pool == 1
            ran = await calls.short(where)  # would block the loop behind nothing: pooled
            release.set()
            assert await held is True
            after = await calls.short(where)  # the pool is empty again: on the loop
            return ran, after, calls

    ran, after, calls = asyncio.run(run())
    loop_thread = threading.get_ident()  # asyncio.run ran the loop on this thread
    assert ran != loop_thread and after == loop_thread
    assert calls.on_pool == 0 and calls.stats() == {"inlined": 1, "pooled": 2}


def test_an_error_of_a_call_on_the_loop_reaches_the_caller_and_leaves_no_count():
    async def run():
        with ThreadPoolExecutor(1) as pool:
            calls = BrokerCalls(pool, inline=True)
            with pytest.raises(ZeroDivisionError):
                await calls.short(lambda: 1 / 0)
            with pytest.raises(ZeroDivisionError):
                await calls.pool(lambda: 1 / 0)
            return calls.on_pool

    assert asyncio.run(run()) == 0
