"""The value log of the ``vlog`` layout, a leaf package: it knows nothing of the store.

- ``segments``: the record format and one segment file (append, read, sync).
- ``liveness``: a segment's row in ``meta``, the changes a batch makes to the rows, delay classes.
- ``valuelog``: ``ValueLog``, which owns ``vlog/``: the segments, their rows, appends, reads,
  prefetch hints and release; rows change only through ``stage`` (into the caller's WriteBatch)
  and ``commit`` (after the write).
- ``syncer``: the background fdatasync of appended segments (async mode).
- ``gc``: relocation of sparse segments and release of empty ones, done through a small
  ``IndexSide`` protocol that the store implements (``rocksdb/relocation_side.py``).
"""
from rocks_timer.timer.rocksdb.vlog.valuelog import CURSOR_FILE, ValueLog

__all__ = ["CURSOR_FILE", "ValueLog"]
