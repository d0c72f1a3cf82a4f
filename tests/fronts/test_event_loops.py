"""The main thread keeps an event loop between tests (tests/support/event_loops.py)."""
import asyncio

import grpc

from tests.support.event_loops import restore_main_loop


def test_a_grpc_aio_channel_can_be_made_on_the_main_thread_after_asyncio_run():
    asyncio.run(asyncio.sleep(0))
    restore_main_loop()
    channel = grpc.aio.insecure_channel("127.0.0.1:1")  # looks the thread's loop up
    asyncio.get_event_loop_policy().get_event_loop().run_until_complete(channel.close())


def test_without_the_restore_asyncio_run_leaves_the_main_thread_without_a_loop():
    asyncio.run(asyncio.sleep(0))
    try:
        asyncio.get_event_loop_policy().get_event_loop()
        raised = False
    except RuntimeError:
        raised = True
    restore_main_loop()
    assert raised  # the state the restore exists for (Python 3.11's policy)
