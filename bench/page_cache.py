"""Cost of writing fresh page-cache memory in large vs small writes (why the CommitLog writes in
slices: rocks_timer/fileio.py).

    python -m bench.page_cache [--mb 224] [--pause 3] [--rounds 3]

For each write size, ``--rounds`` times: sleep ``--pause`` seconds (long enough for the kernel to
report the previous round's freed memory to the VM host), write ``--mb`` MiB of random bytes to a
new file in writes of that size, time the writes (not the fsync that follows), delete the file.
Then, once per size, the same bytes written again over the pages just written, as a control.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bench.common import median, scratch_dir, write_result

SIZES_KIB = [16384, 2048, 1024, 256, 64, 16]


def write_file(path: Path, block: memoryview, total: int, size: int, again: bool) -> float:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        passes = 2 if again else 1
        elapsed = 0.0
        for _ in range(passes):
            start = time.perf_counter()
            for pos in range(0, total, size):
                os.pwrite(fd, block[:size], pos)
            elapsed = time.perf_counter() - start  # the last pass counts
        os.fsync(fd)
        return elapsed
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.page_cache", description=__doc__)
    parser.add_argument("--mb", type=int, default=224, help="MiB per file (a multiple of 16)")
    parser.add_argument("--pause", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    total = (args.mb // 16) * (16 << 20)
    block = memoryview(os.urandom(16 << 20))
    rows = {}
    for kib in SIZES_KIB:
        fresh = []
        for _ in range(args.rounds):
            time.sleep(args.pause)
            with scratch_dir(prefix="pagecache-") as d:
                fresh.append(write_file(d / "f", block, total, kib << 10, again=False))
        with scratch_dir(prefix="pagecache-") as d:
            rewrite = write_file(d / "f", block, total, kib << 10, again=True)
        rows[f"{kib}KiB"] = {"fresh_s": [round(t, 3) for t in fresh],
                             "fresh_median_s": round(median(fresh), 3),
                             "rewrite_s": round(rewrite, 3)}
        print(f"writes of {kib:>5} KiB: fresh pages {' '.join(f'{t:.3f}' for t in fresh)} s, "
              f"rewriting them {rewrite:.3f} s", flush=True)
    path = write_result("page_cache", {"mib": total >> 20, "pause_s": args.pause,
                                       "rounds": args.rounds, "sizes": rows}, args.results_dir)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
