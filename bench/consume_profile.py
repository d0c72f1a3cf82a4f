"""How fast a consumer reads through the library, and where the time goes (issue 26).

    python -m bench.consume_profile [--messages 200000] [--profile]

``--messages`` delivered-like messages (1 KiB bodies, a message id and the three timer
properties a delivered copy carries) are appended to a fresh MessageStore in groups of 2,000
(the CommitLog's batched append, timed), then read back from queue offset 0, 4,096 per call:

- ``pull``: ``MessageStore.pull`` (``Message`` objects, what ``Broker.pull`` returns);
- ``batch.bodies``: ``read_batch`` (``Broker.pull_batch``'s read) and every body;
- ``batch views``: ``read_batch`` and, per message, a view's ``body`` and ``queue_offset``.

Each read runs twice; every figure is printed with its share of the append rate. With
``--profile`` each read runs a third time under cProfile and its top functions are printed.
Writes no results file (the consumer figures of record are ``bench.rocks``'s). On a build
without ``read_batch`` only ``pull`` is measured.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import random
import sys
import time

from bench.common import scratch_dir
from rocks_timer import BrokerConfig, ManualClock, Message
from rocks_timer.message_store import MessageStore

PAGE = 4096


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.consume_profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    n = args.messages
    rng = random.Random(3)
    pool = [rng.randbytes(1024) for _ in range(64)]
    with scratch_dir(prefix="consume-") as d:
        store = MessageStore.open(d, BrokerConfig(), ManualClock(1_767_225_600_000))
        msgs = [Message("burst", pool[i % 64], msg_id=f"BB{i:030X}",
                        properties={"TIMER_DELIVER_MS": "1767225661000",
                                    "TIMER_OUT_MS": "1767225661000",
                                    "TIMER_DEQUEUE_MS": "1767225662000"}) for i in range(n)]
        gc.collect()
        gc.freeze()
        start = time.perf_counter()
        for future in [store.put_messages_async(msgs[i:i + 2000]) for i in range(0, n, 2000)]:
            future.result()
        append = n / (time.perf_counter() - start)
        print(f"CommitLog append (2,000 per call): {append:,.0f} msg/s")
        del msgs

        def pull() -> None:
            offset = 0
            while page := store.pull("burst", 0, offset, PAGE):
                for m in page:
                    m.body
                offset = page[-1].queue_offset + 1

        def batch_bodies() -> None:
            offset = 0
            while batch := store.read_batch("burst", 0, offset, PAGE):
                for body in batch.bodies():
                    len(body)
                offset = batch.next_offset

        def batch_views() -> None:
            offset = 0
            while batch := store.read_batch("burst", 0, offset, PAGE):
                for m in batch:
                    m.body, m.queue_offset
                offset = batch.next_offset

        reads = (("pull", pull), ("batch.bodies", batch_bodies), ("batch views", batch_views))
        if not hasattr(store, "read_batch"):  # a build before the page read (comparisons)
            reads = reads[:1]
        for name, read in reads:
            for _ in range(2):
                start = time.perf_counter()
                read()
                rate = n / (time.perf_counter() - start)
                print(f"{name}: {rate:,.0f} msg/s ({rate / append:.0%} of the append)")
        if args.profile:
            for name, read in reads:
                profile = cProfile.Profile()
                profile.runcall(read)
                out = io.StringIO()
                pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(12)
                print(f"== profile: {name}\n{out.getvalue()}")
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
