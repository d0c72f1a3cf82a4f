"""CommitLog append throughput through the async group-commit path, against the limit of a
plain Python sequential write of the same bytes, measured in the same run.

    python -m bench.commitlog [--messages 200000] [--body 1024] [--runs 5]

Variants (each on a fresh directory). The runs are interleaved: every round runs every variant
once, in order, so a variant and the baseline meet the same state of the machine (on these VMs
fresh page-cache memory costs more or less depending on what the balloon has handed back to the
host; see rocks_timer/fileio.py). Reported: the median time per variant and the median of the
per-round ratios to the baseline (``vs_baseline``, the figure the target is about).
- ``baseline``: the encoded records written with one ``os.write`` per record, then one fsync
  (what a plain Python appender does; the limit we compare against);
- ``baseline_buffered``: the same bytes through a buffered file object (bigger writes);
- ``async_single``: ``put_message_async`` per message, all awaited at the end;
- ``sync_single``: ``put_message`` per message, each awaited before the next (on an idle store
  the caller writes it itself, see MessageStore.put_messages);
- ``async_batch100``: ``put_messages_async`` with 100 messages per call;
- ``async_batch100_client_serialized``: as ``async_batch100``, with each message's property
  string already built by the producer (a RocketMQ client sends it serialized), so the timed
  path is the broker's share of the work only;
- ``sync_flush_batch100``: as above with ``flush_disk_type="sync"`` (one fdatasync per group).
Every variant ends with an fsync so bytes are on disk, not only in the page cache, and starts
with the garbage collector settled (``gc.collect(); gc.freeze()``) so it does not walk the
prepared inputs while the clock runs.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

from bench.common import median, scratch_dir, settled_gc, write_result
from rocks_timer import BrokerConfig, ManualClock, Message
from rocks_timer.message_store import MessageStore
from rocks_timer.record import encode_record


def make_messages(n: int, body_size: int, seed: int, serialized: bool = False) -> list[Message]:
    """``serialized``: the producer has already built the property string, as a RocketMQ client
    does before sending (the broker receives it encoded)."""
    rng = random.Random(seed)
    bodies = [rng.randbytes(body_size) for _ in range(256)]
    messages = [Message("bench", bodies[i % 256], msg_id=f"{seed:08X}{i:024X}") for i in range(n)]
    if serialized:
        for message in messages:
            message.encoded_properties  # noqa: B018 - cached on the message
    return messages


def baseline(messages, buffered: bool) -> tuple[float, int]:
    records = [encode_record(m, queue_id=0, queue_offset=i, physical_offset=0, store_ms=1,
                             born_ms=1) for i, m in enumerate(messages)]
    with scratch_dir(prefix="baseline-") as d:
        path = d / "log"
        with settled_gc():
            start = time.perf_counter()
            if buffered:
                with open(path, "wb") as f:
                    for record in records:
                        f.write(record)
                    f.flush()
                    os.fsync(f.fileno())
            else:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                for record in records:
                    os.write(fd, record)
                os.fsync(fd)
                os.close(fd)
            elapsed = time.perf_counter() - start
        return elapsed, sum(map(len, records))


def store_run(messages, batch: int | None, flush: str, serialized: bool = False,
              sync: bool = False) -> tuple[float, int]:
    config = BrokerConfig(flush_disk_type=flush).validate()
    messages = [m.copy() for m in messages]  # fresh objects: no cached property strings
    if serialized:
        for message in messages:
            message.encoded_properties  # noqa: B018 - built by the producer, outside the timing
    with scratch_dir(prefix="commitlog-") as d:
        store = MessageStore.open(d, config, ManualClock(1_700_000_000_000))
        with settled_gc():
            start = time.perf_counter()
            futures = []
            if sync:
                for m in messages:
                    store.put_message(m)
            elif batch is None:
                futures = [store.put_message_async(m) for m in messages]
            else:
                futures = [store.put_messages_async(messages[i:i + batch])
                           for i in range(0, len(messages), batch)]
            for future in futures:
                future.result()
            store.flush()
            elapsed = time.perf_counter() - start
        written = store.commitlog.bytes_written
        store.close()
        return elapsed, written


VARIANTS = {
    "baseline": lambda msgs: baseline(msgs, buffered=False),
    "baseline_buffered": lambda msgs: baseline(msgs, buffered=True),
    "async_single": lambda msgs: store_run(msgs, None, "async"),
    "sync_single": lambda msgs: store_run(msgs, None, "async", sync=True),
    "async_batch100": lambda msgs: store_run(msgs, 100, "async"),
    "async_batch100_client_serialized": lambda msgs: store_run(msgs, 100, "async", True),
    "sync_flush_batch100": lambda msgs: store_run(msgs, 100, "sync"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.commitlog", description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=5, help="rounds (every variant once each)")
    parser.add_argument("--results-dir", type=Path, default=None,
                        help="where the JSON goes (default bench/results)")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    messages = make_messages(args.messages, args.body, args.seed)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    written: dict[str, int] = {}
    for _ in range(args.runs):
        for name, run in VARIANTS.items():
            elapsed, written[name] = run(messages)
            times[name].append(elapsed)
    rows = {}
    for name, runs in times.items():
        t = median(runs)
        ratios = [written[name] / v / (written["baseline"] / b)
                  for v, b in zip(runs, times["baseline"])]
        rows[name] = {"seconds": round(t, 4), "runs": [round(x, 4) for x in runs],
                      "msgs_per_s": round(args.messages / t),
                      "mb_per_s": round(written[name] / t / 1e6, 1), "bytes": written[name],
                      "vs_baseline": round(median(ratios), 3),
                      "vs_baseline_runs": [round(r, 3) for r in ratios]}
    path = write_result("commitlog", {"messages": args.messages, "body_bytes": args.body,
                                      "runs": args.runs, "variants": rows,
                                      "target": "async_batch100 >= 50% of the baseline's MB/s"},
                        args.results_dir)
    print("| variant | msgs/s | MB/s | vs baseline (median of rounds) | per round |\n"
          "|---|---|---|---|---|")
    for name, row in rows.items():
        per_round = " ".join(f"{r:.0%}" for r in row["vs_baseline_runs"])
        print(f"| {name} | {row['msgs_per_s']:,} | {row['mb_per_s']} | {row['vs_baseline']:.0%} "
              f"| {per_round} |")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
