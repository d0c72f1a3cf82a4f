"""Exact pending counts per topic, kept in ``meta`` (issue 28: ``rocketmq_timing_messages``).

Every change of the ``timer`` column family changes the counters of the topics whose keys it
adds or removes **in the same WriteBatch** (staged by the key index with the due counters), so
they are exact after any crash, and a scrape reads them in O(topics) instead of walking the
keys (a walk of 200,000 pending keys cost about 53 ms per scrape). Topics are few, so every
counter is held in memory from the open on; a counter that reaches 0 is deleted.
"""
from __future__ import annotations

import logging
import operator
from collections import Counter
from typing import Any, Iterable

from rocksdict import ReadOptions, WriteBatch

from rocks_timer.timer import keys as K
from rocks_timer.timer.rocksdb.scan import check_iterator

log = logging.getLogger(__name__)
PREFIX = K.META_TOPIC_COUNT_PREFIX
# the topic's bytes of a raw timer key (due, topic length, topic, 16-byte msg id), as one C
# call per key: a delivery batch counts thousands
topic_of = operator.itemgetter(slice(K.DUE_SIZE + 1, -K.MSG_ID_SIZE))


def topic_counts_py(raws: Iterable[bytes]) -> dict[bytes, int]:
    """topic bytes -> how many keys of ``raws`` are in it. The reference of the native
    ``topic_counts`` (a delivery batch counts thousands of keys)."""
    return dict(Counter(map(topic_of, raws)))


try:
    from rocks_timer._native.codec import topic_counts
except ImportError:  # pragma: no cover - no C compiler at install time
    topic_counts = topic_counts_py


def topic_deltas(raws: Iterable[bytes], sign: int) -> dict[bytes, int]:
    """topic bytes -> ``sign`` x the number of keys of ``raws`` in it."""
    counts = topic_counts(raws if isinstance(raws, (list, tuple, dict)) else list(raws))
    return {topic: sign * n for topic, n in counts.items()} if sign != 1 else counts


def read_stored(meta: Any) -> dict[bytes, int]:
    """Every topic counter in ``meta`` (open, check; O(topics))."""
    out: dict[bytes, int] = {}
    opts = ReadOptions()
    opts.set_iterate_upper_bound(PREFIX[:-1] + bytes((PREFIX[-1] + 1,)))
    it = meta.iter(opts)
    try:
        it.seek(PREFIX)
        while it.valid():
            out[bytes(it.key())[len(PREFIX):]] = K.unpack_count(it.value())
            it.next()
        check_iterator(it, "topic counters")
    finally:
        del it
    return out


def expected_topics(raws: Iterable[bytes]) -> dict[bytes, int]:
    """What the counters must hold for the pending keys ``raws`` (check, rebuild)."""
    return topic_deltas(raws, 1)


def named(counts: dict[bytes, int]) -> dict[str, int]:
    """Counts by topic name, sorted by name."""
    out: dict[str, int] = {}
    for raw, n in counts.items():
        name = raw.decode("utf-8", "replace")
        out[name] = out.get(name, 0) + n
    return dict(sorted(out.items()))


class TopicCounters:
    """The per-topic pending counters of one store: all in memory, staged into the caller's
    batch, committed after it (the key index calls both, under the store's lock)."""

    def __init__(self, meta: Any, meta_h: Any) -> None:
        self._meta_h = meta_h
        self._counts = read_stored(meta)
        self._names: dict[bytes, bytes] = {}  # topic -> its counter's key (built once)
        self.underflows = 0

    def close(self) -> None:
        self._meta_h = None
        self._counts.clear()

    def stage(self, deltas: dict[bytes, int], batch: WriteBatch) -> dict[bytes, int]:
        """Put the counters ``deltas`` (topic bytes -> +n/-n) change into ``batch``; returns
        the new values for :meth:`commit`. A count below zero (only a key written behind the
        store's back; ``check`` reports it) is logged and kept at 0."""
        counts, meta_h, names = self._counts, self._meta_h, self._names
        new: dict[bytes, int] = {}
        for topic, delta in deltas.items():
            if not delta:
                continue
            value = counts.get(topic, 0) + delta
            if value < 0:
                log.warning("topic counter %r would become %d; kept at 0", topic, value)
                self.underflows += 1
                value = 0
            new[topic] = value
            name = names.get(topic)
            if name is None:
                name = names[topic] = PREFIX + topic
            if value:
                batch.put(name, value.to_bytes((value.bit_length() + 7) // 8, "big"), meta_h)
            else:
                batch.delete(name, meta_h)
        return new

    def stage_one(self, topic: bytes, batch: WriteBatch, delta: int = 1) -> int:
        """:meth:`stage` of one new key of ``topic`` (the single send; ``delta`` -1: one key
        removed, the single cancel); returns the new count for :meth:`commit_one`."""
        value = self._counts.get(topic, 0) + delta
        name = self._names.get(topic)
        if name is None:
            name = self._names[topic] = PREFIX + topic
        if delta > 0:
            batch.put(name, value.to_bytes((value.bit_length() + 7) // 8, "big"), self._meta_h)
            return value
        if value < 0:  # as stage: only a key written behind the store's back
            log.warning("topic counter %r would become %d; kept at 0", topic, value)
            self.underflows += 1
            value = 0
        if value:
            batch.put(name, value.to_bytes((value.bit_length() + 7) // 8, "big"), self._meta_h)
        else:
            batch.delete(name, self._meta_h)
        return value

    def commit_one(self, topic: bytes, value: int) -> None:
        if value:
            self._counts[topic] = value
        else:
            self._counts.pop(topic, None)

    def commit(self, new: dict[bytes, int]) -> None:
        counts = self._counts
        for topic, value in new.items():
            if value:
                counts[topic] = value
            else:
                counts.pop(topic, None)

    def reset(self, counts: dict[bytes, int]) -> None:
        """After a rebuild wrote the counters directly."""
        self._counts = {topic: n for topic, n in counts.items() if n}

    def counts(self) -> dict[str, int]:
        """Pending keys by topic name (sorted), from memory: O(topics)."""
        return named(self._counts)

    def total(self) -> int:
        """Pending keys of every topic: the store's pending count (O(topics))."""
        return sum(self._counts.values())


def stage_clear(batch: WriteBatch, meta_h: Any) -> None:
    """Delete every topic counter (a rebuild writes them again)."""
    batch.delete_range(PREFIX, PREFIX[:-1] + bytes((PREFIX[-1] + 1,)), meta_h)


def stage_put(counts: dict[bytes, int], batch: WriteBatch, meta_h: Any) -> None:
    for topic, n in counts.items():
        if n:
            batch.put(PREFIX + topic, K.pack_count(n), meta_h)
