"""The RocksDB timer engine (RIP-43 option B), one module per idea.

- ``store``: the ``TimerStore`` operations (schedule, claim, complete, cancel, scan, reconcile)
  over the ``timer`` index column family, layout-agnostic.
- ``index``: what an index value is: the whole message (``inline``) or a pointer into a value
  segment (``vlog``), and what ``scan`` reads from either.
- ``segments`` / ``vlog``: the append-only value segments of the ``vlog`` layout, their
  liveness table in ``meta``, reads, prefetch and release.
- ``reclaim``: one-shot relocation of sparse segments into due-day "long" segments.
- ``meta``, ``scan``, ``maint``, ``profiles``: format settings and counters, the listing walk,
  compaction/statistics/check, RocksDB option profiles.
"""
from rocks_timer.timer.rocksdb.store import RocksTimerStore

__all__ = ["RocksTimerStore"]
