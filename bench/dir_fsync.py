"""What durability by name costs: creating a file with and without the fsync of its directory.

    python -m bench.dir_fsync [--files 200] [--runs 3]

Each run creates ``--files`` files in a fresh directory on a real disk, alternately with a plain
``os.open(O_CREAT)`` and with ``fileio.create_durably`` (the same, then an fsync of the
directory), writes and fdatasyncs 4 KiB in each (as a first append would), and reports the
median time per file of each way. The send path pays the difference once per new value segment
(``vlog_segment_bytes`` of bodies, default 64 MiB, per delay class), CommitLog segment
(``commitlog_segment_size``) or TimerLog segment: ``per_gib_ms`` spreads it over a GiB of bodies
at the default segment size.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bench.common import median, scratch_dir, write_result
from rocks_timer.fileio import create_durably

DEFAULT_SEGMENT = 64 << 20


def _one(path: Path, durable: bool) -> float:
    start = time.perf_counter()
    if durable:
        fd = create_durably(path, os.O_RDWR, 0o600)
    else:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.pwrite(fd, b"\0" * 4096, 0)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dir_fsync", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    plain, durable = [], []
    for _ in range(args.runs):
        with scratch_dir(prefix="dir-fsync-") as d:
            for i in range(args.files):  # alternate, so both meet the same disk state
                (durable if i % 2 else plain).append(_one(d / f"{i:010d}", bool(i % 2)))
    plain_ms, durable_ms = median(plain) * 1000, median(durable) * 1000
    extra_ms = durable_ms - plain_ms
    per_gib = extra_ms * (1 << 30) / DEFAULT_SEGMENT
    print(f"create + 4 KiB fdatasync: {plain_ms:.3f} ms; with the directory's fsync: "
          f"{durable_ms:.3f} ms (+{extra_ms:.3f} ms per new file, {per_gib:.1f} ms per GiB of "
          f"bodies at 64 MiB segments)")
    path = write_result("dir_fsync", {"files": args.files, "runs": args.runs,
                                      "plain_ms": round(plain_ms, 4),
                                      "durable_ms": round(durable_ms, 4),
                                      "extra_ms_per_file": round(extra_ms, 4),
                                      "per_gib_ms": round(per_gib, 2)}, args.results_dir)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
