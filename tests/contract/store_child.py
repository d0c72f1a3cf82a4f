"""Child process of the store-level contract tests (test_store_contract.py).

Usage: python -m tests.contract.store_child MODE ENGINE ROOT SHAPE

``complete-fails``: three twin stores claim 200 records each; one completes them (SHAPE
``whole``: the claim as it came; ``part``: a list of 150 of its records) and measures the WAL bytes
that took; the other two complete under a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored, so a
write past it fails with EFBIG) that lets the WAL grow by nothing, or by half that. Prints what
happened and what each store says afterwards, then exits without closing.

``crash-before-complete``: one full delivery (so the store has a reconcile point), then 40
records claimed; the copies of the even ones are put into the CommitLog; it prints READY and
waits to be killed, completing nothing.
"""
from __future__ import annotations

import os
import resource
import signal
import sys
import time
from pathlib import Path

from tests.contract.store_harness import StoreHarness, ids, users


def wal_size(h: StoreHarness) -> int:
    """Bytes in the store's live RocksDB write-ahead log (its newest ``*.log``)."""
    logs = sorted((h.root / "timer-rocksdb").glob("*.log"), key=lambda p: int(p.stem))
    return logs[-1].stat().st_size


def complete_fails(engine: str, root: Path, shape: str) -> None:
    """Three twin stores: A completes freely and measures how many WAL bytes its complete
    wrote (G); B may then grow no file at all, C by G // 2 (any split write lands its first
    part, never the whole)."""
    stores = {name: StoreHarness(engine, root / name) for name in "ABC"}
    given = {}
    for name, h in stores.items():
        sent = [h.schedule(h.now + i)[0] for i in range(200)]
        h.clock.advance(1_000)
        records = h.claim()
        assert sorted(ids(records)) == sorted(sent)
        # "whole": the claim as the deliverer completes it; "part": a list of 150 of its records
        given[name] = records if shape == "whole" else list(records)[:150]
        print(name, "CLAIMED", " ".join(ids(records)), flush=True)
        print(name, "GIVEN", " ".join(ids(given[name])), flush=True)
    a = stores["A"]
    before = wal_size(a)
    a.store.complete(given["A"], 4242)
    growth = wal_size(a) - before
    print("A GROWTH", growth, flush=True)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    for name, room in (("B", 0), ("C", growth // 2)):
        h = stores[name]
        resource.setrlimit(resource.RLIMIT_FSIZE, (wal_size(h) + room, hard))
        try:
            h.store.complete(given[name], 4242)
            print(name, "COMPLETE returned", flush=True)
        except Exception as exc:  # noqa: BLE001 - the test reads which
            print(name, "COMPLETE raised", type(exc).__name__,
                  str(exc).replace("\n", " ")[:200], flush=True)
        print(name, "PENDING", h.store.pending_count(), flush=True)
        print(name, "SCAN", len(h.store.scan(limit=1_000)), flush=True)


def crash_before_complete(h: StoreHarness) -> None:
    first = h.claim() if h.schedule(h.now) else []
    print("START", h.deliver(first), flush=True)
    sent = [h.schedule(h.now + 10 * i)[0] for i in range(40)]
    h.clock.advance(1_000)
    records = users(h.claim())
    assert sorted(ids(records)) == sorted(sent)
    reached = records[::2]
    end = h.put(reached)
    print("CLAIMED", " ".join(ids(records)), flush=True)
    print("REACHED", " ".join(ids(reached)), flush=True)
    print("END", end, flush=True)
    print("READY", flush=True)
    time.sleep(60)  # killed here


def main() -> None:
    mode, engine, root, shape = sys.argv[1:5]
    if mode == "complete-fails":
        complete_fails(engine, Path(root), shape)
    else:
        crash_before_complete(StoreHarness(engine, Path(root)))
    os._exit(0)  # no close: the store is left as a crash would leave it


if __name__ == "__main__":
    main()
