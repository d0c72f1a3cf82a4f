"""Exact pending counts per due second, hour and UTC day, kept in ``meta``.

Every change of the ``timer`` column family (schedule, delivery, cancel, reconcile, quarantine,
reschedule) changes the counters of the keys it adds or removes **in the same WriteBatch**, so
they are exact after any crash. A count over whole seconds [lo, hi) reads at most the second
counters of the partial hours at both ends, the hour counters of the partial days and the day
counters between: a few hundred small values, never a walk of the keys.

Counter keys and widths come from :mod:`rocks_timer.timer.keys` (``DUE_COUNTER_WIDTHS``); a
counter that reaches 0 is deleted. Current values are cached (bounded) so a send reads a
counter from RocksDB only the first time it touches it; every write happens under the store's
lock, so the cache cannot go stale.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Iterable, Sequence

from rocksdict import ReadOptions, WriteBatch

from rocks_timer.timer import keys as K
from rocks_timer.timer.histogram import check_bounds
from rocks_timer.timer.rocksdb.scan import check_iterator

log = logging.getLogger(__name__)
pack_count, unpack_count = K.pack_count, K.unpack_count
CACHE_MAX = 1 << 18
SECOND, HOUR, DAY = 1, 3_600, 86_400  # in seconds
(_S, _), (_H, _HOUR_MS), (_D, _) = K.DUE_COUNTER_WIDTHS
MAX_BUCKET, BUCKET_SIZE = K.MAX_DUE_BUCKET, K.DUE_BUCKET_SIZE
UPPER_MAX = 1 << 12  # hours whose counter keys stage_one keeps
assert all(width % 1000 == 0 for _, width in K.DUE_COUNTER_WIDTHS)  # stage() sums seconds


def _ceil(x: int, step: int) -> int:
    return -(-x // step) * step


class DueCounters:
    """The due counters of one store: staged into the caller's batch, committed after it."""

    def __init__(self, meta: Any, meta_h: Any) -> None:
        self._meta = meta
        self._meta_h = meta_h
        self._cache: dict[bytes, int] = {}
        self._upper: dict[int, tuple[bytes, bytes]] = {}  # hour -> its hour and day counter keys
        self.underflows = 0

    def close(self) -> None:
        self._meta = self._meta_h = None
        self._cache.clear()

    # -- writes (caller holds the store's lock) ---------------------------------------------------
    def stage(self, deltas: dict[int, int], batch: WriteBatch,
              emptied: Sequence[tuple[int, int]] = ()) -> dict[bytes, int]:
        """Put the counters changed by ``deltas`` (due_ms -> +n/-n) into ``batch``; returns
        the new values for :meth:`commit`. A count below zero (only a key written behind the
        store's back) is logged and kept at 0. ``emptied``: due intervals ``(lo_ms, hi_ms)``,
        ends excluded, left without any pending key by this batch: the counters of the buckets
        wholly inside are deleted by one range per level instead of one delete per bucket (a
        delivery of sparse due times would otherwise write a delete per second it passes)."""
        cache = self._cache
        new: dict[bytes, int] = {}
        if len(deltas) == 1 and not emptied:  # a single send, or a batch due in one ms
            ((due_ms, delta),) = deltas.items()
            per_key = dict.fromkeys(K.due_counter_keys(due_ms), delta)
        else:
            per_second: dict[int, int] = {}  # every width is whole seconds: sum those first
            for due_ms, delta in deltas.items():
                if delta:
                    second = due_ms // 1000
                    per_second[second] = per_second.get(second, 0) + delta
            per_hour: dict[int, int] = {}
            per_day: dict[int, int] = {}
            for second, delta in per_second.items():
                hour, day = second // HOUR, second // DAY
                per_hour[hour] = per_hour.get(hour, 0) + delta
                per_day[day] = per_day.get(day, 0) + delta
            cleared = _clear_ranges(emptied, batch, self._meta_h) if emptied else {}
            per_key = {}
            # the buckets wholly inside an emptied interval were cleared by range: their
            # counters are 0 now (a delivery of a span of seconds builds no key for the
            # seconds inside; only the buckets left are named, then read and written)
            for prefix, buckets in ((_S, per_second), (_H, per_hour), (_D, per_day)):
                ranges = cleared.get(prefix)
                for bucket, delta in buckets.items():
                    bucket = min(bucket, MAX_BUCKET)
                    name = prefix + bucket.to_bytes(BUCKET_SIZE, "big")
                    if ranges and _in_ranges(bucket, ranges):
                        new[name] = 0
                    else:
                        per_key[name] = per_key.get(name, 0) + delta
        missing = [name for name in per_key if name not in cache]
        if missing:
            for name, raw in zip(missing, self._meta.get(missing)):
                cache[name] = 0 if raw is None else unpack_count(raw)
        new.update(self._stage_deltas(per_key, batch))
        return new

    def stage_one(self, due_ms: int, batch: WriteBatch, delta: int = 1) -> dict[bytes, int]:
        """:meth:`stage` of one new key (the single send): its three counters up by one
        (``delta`` -1: one key removed, the single cancel). The hour and day counters' keys
        are kept per hour (a send builds only its second's)."""
        cache, meta_h = self._cache, self._meta_h
        hour = due_ms // _HOUR_MS
        upper = self._upper.get(hour)
        if upper is None:
            if len(self._upper) >= UPPER_MAX:
                self._upper.clear()
            upper = self._upper[hour] = K.due_counter_keys(due_ms)[1:]
        s_name = _S + min(due_ms // 1000, MAX_BUCKET).to_bytes(BUCKET_SIZE, "big")
        h_name, d_name = upper
        s_old, h_old, d_old = cache.get(s_name), cache.get(h_name), cache.get(d_name)
        if s_old is None or h_old is None or d_old is None:
            names = (s_name, h_name, d_name)
            missing = [name for name in names if name not in cache]
            for name, raw in zip(missing, self._meta.get(missing)):
                cache[name] = 0 if raw is None else unpack_count(raw)
            s_old, h_old, d_old = cache[s_name], cache[h_name], cache[d_name]
        if delta < 0:  # a counter may reach 0 (deleted) or, behind the store's back, below
            return self._stage_deltas({s_name: delta, h_name: delta, d_name: delta}, batch)
        s_new, h_new, d_new = s_old + delta, h_old + delta, d_old + delta
        put = batch.put
        put(s_name, s_new.to_bytes((s_new.bit_length() + 7) // 8, "big"), meta_h)
        put(h_name, h_new.to_bytes((h_new.bit_length() + 7) // 8, "big"), meta_h)
        put(d_name, d_new.to_bytes((d_new.bit_length() + 7) // 8, "big"), meta_h)
        return {s_name: s_new, h_name: h_new, d_name: d_new}

    def _stage_deltas(self, per_key: dict[bytes, int], batch: WriteBatch) -> dict[bytes, int]:
        """Put each counter ``per_key`` changes (name -> delta; its value cached) into
        ``batch``: a counter at 0 is deleted, one below 0 logged and kept at 0. Returns the
        new values."""
        cache, new = self._cache, {}
        put, delete, meta_h = batch.put, batch.delete, self._meta_h
        for name, delta in per_key.items():
            if not delta:
                continue
            value = cache[name] + delta
            if value < 0:  # only a key written behind the store's back (check() reports it)
                log.warning("due counter %s would become %d; kept at 0", name.hex(), value)
                self.underflows += 1
                value = 0
            new[name] = value
            if value:
                put(name, pack_count(value), meta_h)
            else:
                delete(name, meta_h)
        return new

    def commit(self, new: dict[bytes, int]) -> None:
        if len(self._cache) + len(new) > CACHE_MAX:
            self._cache.clear()
        self._cache.update(new)

    def forget(self) -> None:
        """Drop the cache (after a rebuild wrote the counters directly)."""
        self._cache.clear()

    # -- reads (caller holds the store's lock) ----------------------------------------------------
    def _sum(self, prefix: bytes, lo: int, hi: int | None) -> int:
        """Sum of the counters of one level with bucket numbers in [lo, hi)."""
        if hi is not None and hi <= lo:
            return 0
        opts = ReadOptions()
        opts.set_iterate_upper_bound(K.due_counter_key(prefix, hi) if hi is not None
                                     else prefix + b"\xff" * 9)
        it = self._meta.iter(opts)
        total = 0
        try:
            it.seek(K.due_counter_key(prefix, lo))
            while it.valid():
                total += unpack_count(it.value())
                it.next()
            check_iterator(it, "due counters")
        finally:
            del it
        return total

    def count(self, lo_ms: int | None, hi_ms: int | None) -> int:
        """Pending keys due in [lo_ms, hi_ms) (None: unbounded); bounds are whole seconds."""
        check_bounds([(lo_ms, hi_ms)])
        a = 0 if lo_ms is None else max(0, lo_ms // 1000)
        b = None if hi_ms is None else max(0, hi_ms // 1000)
        if b is not None and b <= a:
            return 0
        a_h = _ceil(a, HOUR)
        if b is not None and a_h >= b:
            return self._sum(_S, a, b)
        total = self._sum(_S, a, a_h)
        b_h = None if b is None else b // HOUR * HOUR
        a_d = _ceil(a_h, DAY)
        if b_h is not None and a_d >= b_h:
            total += self._sum(_H, a_h // HOUR, b_h // HOUR)
        else:
            total += self._sum(_H, a_h // HOUR, a_d // HOUR)
            b_d = None if b_h is None else b_h // DAY * DAY
            total += self._sum(_D, a_d // DAY, None if b_d is None else b_d // DAY)
            if b_d is not None:
                total += self._sum(_H, b_d // HOUR, b_h // HOUR)
        if b is not None:
            total += self._sum(_S, b_h, b)
        return total

    def count_many(self, ranges: Sequence[tuple[int | None, int | None]]) -> list[int]:
        return [self.count(lo, hi) for lo, hi in ranges]

    # -- check and rebuild --------------------------------------------------------------------------
    def stored(self) -> dict[bytes, int]:
        """Every counter in ``meta`` (check and rebuild; O(counters))."""
        out: dict[bytes, int] = {}
        for prefix, _ in K.DUE_COUNTER_WIDTHS:
            opts = ReadOptions()
            opts.set_iterate_upper_bound(prefix + b"\xff" * 9)
            it = self._meta.iter(opts)
            try:
                it.seek(prefix)
                while it.valid():
                    out[bytes(it.key())] = unpack_count(it.value())
                    it.next()
                check_iterator(it, "due counters")
            finally:
                del it
        return out


_WIDTH_MS = dict(K.DUE_COUNTER_WIDTHS)
_PREFIX_SIZE = len(_S)
assert all(len(prefix) == _PREFIX_SIZE for prefix in _WIDTH_MS)
MIN_CLEARED = 2  # buckets a range must cover to replace their deletes (a range costs two keys)


def _clear_ranges(emptied: Sequence[tuple[int, int]], batch: WriteBatch,
                  meta_h: Any) -> dict[bytes, list[tuple[int, int]]]:
    """Range-delete, per level, the buckets lying wholly inside an emptied interval; returns
    them as ``{prefix: [(first bucket, end bucket)]}``."""
    cleared: dict[bytes, list[tuple[int, int]]] = {}
    for prefix, width in _WIDTH_MS.items():
        for lo_ms, hi_ms in emptied:
            first, end = lo_ms // width + 1, hi_ms // width  # [first*w, end*w) inside (lo, hi)
            if end - first >= MIN_CLEARED:
                batch.delete_range(K.due_counter_key(prefix, first),
                                   K.due_counter_key(prefix, end), meta_h)
                cleared.setdefault(prefix, []).append((first, end))
    return cleared


def _in_ranges(bucket: int, ranges: list[tuple[int, int]]) -> bool:
    for first, end in ranges:
        if first <= bucket < end:
            return True
    return False


def expected_counters(dues: Iterable[int]) -> dict[bytes, int]:
    """What the counters must hold for pending keys due at ``dues`` (check, rebuild)."""
    out: Counter[bytes] = Counter()
    for due_ms in dues:
        out.update(K.due_counter_keys(due_ms))
    return dict(out)

