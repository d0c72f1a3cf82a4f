"""What the data dir takes on disk, read for ``/metrics`` at most every ``max_age_s`` seconds.

A walk of the data dir is one ``scandir``, one ``stat`` per file and more per directory: about 70
calls that each release the GIL per scrape of a small store, more as value segments and SST files
accumulate. Each release hands the GIL to a sending thread, and the scrape then waits up to the
switch interval (5 ms) to get it back: scraping every second cost the senders 1-2% that way,
more than the scrape's own CPU (docs/DECISIONS.md, "Disk figures at most every 30 s"). Space on
disk moves by segments and compactions, on a scale of minutes, and an operator alerts on it over
minutes, so a figure at most ``max_age_s`` old serves as well; its age is exported beside it.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

MAX_AGE_S = 30.0


def used_bytes(path: os.PathLike | str) -> int:
    """RocketMQ's rocketmq_storage_size: the space in use on the store's file system."""
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def dir_bytes(path: os.PathLike | str) -> int:
    """Bytes the files under ``path`` take on disk (allocated blocks), symlinks not followed."""
    total, stack = 0, [os.fspath(path)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue  # a directory removed meanwhile (a released segment, a compaction)
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
    return total


@dataclass(frozen=True)
class DiskFigures:
    dir_bytes: int       # the data dir's files (rtimer_data_dir_bytes)
    used_bytes: int      # its file system in use (rocketmq_storage_size)
    age_s: float         # how long ago both were read


class DiskUsage:
    """Owns the last reading of the data dir's size and its file system's use, and when it was
    taken (``now_s``: a monotonic clock in seconds, injected for tests)."""

    def __init__(self, path: os.PathLike | str, max_age_s: float = MAX_AGE_S,
                 now_s: Callable[[], float] = time.monotonic):
        self.path = path
        self.max_age_s = max_age_s
        self.now_s = now_s
        self._lock = threading.Lock()  # two scrapes at once walk once
        self._read_at: float | None = None
        self._dir_bytes = self._used_bytes = 0

    def figures(self) -> DiskFigures:
        """The last reading, taken again first if it is ``max_age_s`` old or older."""
        with self._lock:
            now = self.now_s()
            if self._read_at is None or now - self._read_at >= self.max_age_s:
                self._dir_bytes, self._used_bytes = dir_bytes(self.path), used_bytes(self.path)
                self._read_at = now
            return DiskFigures(self._dir_bytes, self._used_bytes, max(0.0, now - self._read_at))
