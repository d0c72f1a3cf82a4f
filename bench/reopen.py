"""How long a MessageStore takes to open over a CommitLog of N messages (its recovery walk).

    python -m bench.reopen [--messages 500000] [--body 100] [--runs 3] [--data DIR]

Writes N messages of ``--body`` bytes over 8 topics, closes the store, then opens and closes it
``--runs`` times and reports the best time. Opening walks the newest CommitLog segment with CRC
checks and every retained record's header to compare it with its ConsumeQueue entry
(rocks_timer/cq_recovery.py). ``--data DIR`` with ``--reuse`` times an existing data dir (to
compare two versions of the code on the same files: run it once per tree, PYTHONPATH set).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.common import scratch_dir, write_result
from rocks_timer import BrokerConfig, ManualClock, Message
from rocks_timer.message_store import MessageStore

TOPICS = 8
BATCH = 5_000


def fill(path: Path, messages: int, body: int) -> None:
    store = MessageStore.open(path, BrokerConfig(), ManualClock(0))
    try:
        for start in range(0, messages, BATCH):
            n = min(BATCH, messages - start)
            store.put_messages([Message(f"t{i % TOPICS}", b"x" * body) for i in range(n)])
    finally:
        store.close()


def time_opens(path: Path, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        store = MessageStore.open(path, BrokerConfig(), ManualClock(0))
        times.append(time.perf_counter() - start)
        store.close()
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reopen", description=__doc__)
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--body", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--reuse", action="store_true", help="time --data as it is")
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args(argv)

    def measure(path: Path) -> dict:
        if not args.reuse:
            fill(path, args.messages, args.body)
        times = time_opens(path, args.runs)
        return {"messages": args.messages, "body": args.body, "open_s": times,
                "best_open_s": min(times)}

    if args.data is not None:
        args.data.mkdir(parents=True, exist_ok=True)
        result = measure(args.data)
    else:
        with scratch_dir(prefix="reopen-") as path:
            result = measure(path / "data")
    write_result("reopen", result, args.results_dir)
    print(f"open over {args.messages} messages: best {result['best_open_s']:.3f} s "
          f"of {args.runs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
