"""Two page-cache effects of this kernel (Linux 6.18, ext4, large folios) that shaped the code.

    python -m bench.page_cache [--mb 224] [--pause 3] [--rounds 3] [--slot-updates 10000]

1. Writing fresh page-cache memory in large vs small writes (why the CommitLog writes in slices:
   rocks_timer/fileio.py). For each write size, ``--rounds`` times: sleep ``--pause`` seconds
   (long enough for the kernel to report the previous round's freed memory to the VM host), write
   ``--mb`` MiB of random bytes to a new file in writes of that size, time the writes (not the
   fsync that follows), delete the file. Then, once per size, the same bytes written again over
   the pages just written, as a control.
2. Bytes written back per 8-byte update through a shared mapping of a sparse file, after the
   mapping was read in order (as the wheel's dequeue walks its slots), with and without
   ``MADV_RANDOM`` (why rocks_timer/timer/wheel/timerwheel.py turns readahead off): the
   ``write_bytes`` of /proc/self/io around ``--slot-updates`` updates at random pages, flushed
   every 2,000.
"""
from __future__ import annotations

import argparse
import mmap
import random
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


def write_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no write_bytes")


def slot_updates(updates: int, random_advice: bool) -> float:
    """Bytes written back per update (see the module docstring, part 2)."""
    size, span = 256 << 20, 64 << 20
    with scratch_dir(prefix="pagecache-mmap-") as d:
        fd = os.open(d / "wheel", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, size)
            with mmap.mmap(fd, size) as m:
                if random_advice:
                    m.madvise(mmap.MADV_RANDOM)
                for pos in range(0, span, mmap.PAGESIZE):  # read in order, like the dequeue
                    m[pos:pos + 8]  # noqa: B018
                rng = random.Random(1)
                before = write_bytes()
                for i in range(updates):
                    pos = rng.randrange(span // mmap.PAGESIZE) * mmap.PAGESIZE
                    m[pos:pos + 8] = b"12345678"
                    if i % 2000 == 1999:
                        m.flush()
                m.flush()
            os.fsync(fd)
            return (write_bytes() - before) / updates
        finally:
            os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.page_cache", description=__doc__)
    parser.add_argument("--mb", type=int, default=224, help="MiB per file (a multiple of 16)")
    parser.add_argument("--pause", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--slot-updates", type=int, default=10_000)
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
        rows[f"{kib}KiB"] = {"fresh_s": [round(t, 6) for t in fresh],
                             "fresh_median_s": round(median(fresh), 6),
                             "rewrite_s": round(rewrite, 6)}
        print(f"writes of {kib:>5} KiB: fresh pages {' '.join(f'{t:.3f}' for t in fresh)} s, "
              f"rewriting them {rewrite:.3f} s", flush=True)
    mapped = {}
    for advice in ("default", "MADV_RANDOM"):
        per_update = slot_updates(args.slot_updates, advice == "MADV_RANDOM")
        mapped[advice] = round(per_update)
        print(f"mapped slot updates, readahead {advice}: {per_update / 1024:.1f} KiB written back "
              f"per 8-byte update", flush=True)
    path = write_result("page_cache", {"mib": total >> 20, "pause_s": args.pause,
                                       "rounds": args.rounds, "sizes": rows,
                                       "slot_updates": args.slot_updates,
                                       "bytes_per_slot_update": mapped}, args.results_dir)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
