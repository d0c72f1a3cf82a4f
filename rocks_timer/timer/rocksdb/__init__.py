"""The RocksDB timer engine (RIP-43 option B): parts that own their state, composed by the
store (docs/DECISIONS.md, "RocksDB engine: parts and owners").

- ``store``: ``RocksTimerStore``, the ``TimerStore`` operations, composing the parts below.
- ``database``: the open RocksDB, its column families, handles and write options.
- ``opening``: the open (refusals over damaged files, format settings, errors mapped).
- ``transaction``: the one stage -> write -> apply order every write site uses.
- ``claims``, ``counts``: the claim cursor with the in-flight set; the exact counters.
- ``keyindex`` (with ``duecount``, ``topiccount``): business keys, due and topic counters.
- ``claim``, ``complete``, ``reschedule``: the services of claim, completion, cancel by key
  and reschedule.
- ``background``: the tombstone reclaim and the ``vlog`` housekeeping, on threads they own.
- ``vlog/``: the value log (segments, liveness, sync, GC), a leaf that knows no store.
- ``index``, ``scan``, ``meta``, ``maint``, ``profiles``, ``setaside``, ``recovery``,
  ``readonly``: index values, the listing walk, format settings, figures and the check,
  RocksDB option profiles, set-aside messages, repair, the read-only open.
"""
from rocks_timer.timer.rocksdb.store import RocksTimerStore

__all__ = ["RocksTimerStore"]
