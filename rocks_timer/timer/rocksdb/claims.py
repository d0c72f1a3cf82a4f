"""``Claims``: the claim cursor and the in-flight set of the RocksDB timer store.

Claims walk keys in order from the claim cursor (the successor of the last claimed key), so
the claimed keys come in increasing order and the in-flight map (insertion-ordered) is sorted.
The persisted cursor is the smallest key not yet completed: the first in-flight key, else the
claim cursor. No key ever lands below the claim cursor: ``schedule`` raises a key's due time to
at least the low watermark (due of the claim cursor + 1), so every key below the cursor is gone
for good (``delete_range`` below it is safe; scans start there).
"""
from __future__ import annotations

from typing import Iterable

from rocks_timer.timer import keys as K


class Claims:
    """Owns the claim cursor and the in-flight map (claimed key -> its index value in
    ``vlog``, so completing it releases the bytes it points at; None in ``inline``). Read and
    changed under the store's lock."""

    __slots__ = ("_cursor", "_in_flight")

    def __init__(self, cursor: bytes) -> None:
        self._cursor = cursor
        self._in_flight: dict[bytes, bytes | None] = {}

    @property
    def cursor(self) -> bytes:
        """The claim cursor: the successor of the last claimed key (b"" before any claim)."""
        return self._cursor

    def low_watermark_ms(self) -> int:
        """Smallest due time whose every key sorts at or after the claim cursor."""
        cursor = self._cursor
        if not cursor:
            return 0
        due_ms = K.key_due_ms(cursor)
        return due_ms if len(cursor) == K.DUE_SIZE else due_ms + 1

    def persisted(self, without: Iterable[bytes] = ()) -> bytes:
        """Smallest key not yet completed, ignoring in-flight keys in ``without``."""
        skip = without if isinstance(without, (set, frozenset, dict)) else set(without)
        for key in self._in_flight:  # sorted: claims happen in increasing key order
            if key not in skip:
                return key
        return self._cursor

    # -- reads ------------------------------------------------------------------------------
    def __contains__(self, raw: bytes) -> bool:
        return raw in self._in_flight

    def __len__(self) -> int:
        return len(self._in_flight)

    def keys(self) -> list[bytes]:
        return list(self._in_flight)

    def overlaps(self, raws: Iterable[bytes]) -> bool:
        return bool(self._in_flight) and not self._in_flight.keys().isdisjoint(raws)

    def holds_all(self, raws: dict) -> bool:
        return self._in_flight.keys() >= raws.keys()

    def index_values(self, raws: Iterable[bytes]) -> list[bytes | None]:
        """The index value each in-flight key of ``raws`` was claimed with."""
        in_flight = self._in_flight
        return [in_flight[raw] for raw in raws]

    # -- changes (store lock held) ----------------------------------------------------------
    def claimed(self, keys: list[bytes], values: list[bytes] | None, last: bytes) -> None:
        """``keys`` (sorted, all above the cursor) are in flight now; ``values`` their index
        values (``vlog``) or None (``inline``); the cursor moves past ``last``, the last key
        the claim took (set-aside ones included)."""
        if values is not None:
            self._in_flight.update(zip(keys, values))
        else:
            self._in_flight.update(dict.fromkeys(keys))
        self._cursor = K.key_successor(last)

    def forget(self, raws: Iterable[bytes]) -> None:
        """Completed keys leave the in-flight set (ones not in it are skipped)."""
        in_flight = self._in_flight
        if isinstance(raws, dict) and len(raws) == len(in_flight) and \
                in_flight.keys() == raws.keys():
            in_flight.clear()  # the common completion: the one claim in flight, whole
            return
        pop = in_flight.pop
        for raw in raws:
            pop(raw, None)

    def repointed(self, raw: bytes, value: bytes | None) -> None:
        """A retry re-sent an in-flight key: completing it must drop the copy the index now
        points at (None for an inline value)."""
        if raw in self._in_flight:
            self._in_flight[raw] = value

    def clear(self) -> None:
        self._in_flight.clear()
