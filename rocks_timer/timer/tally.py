"""Counters the timer path keeps for its metrics, added up per batch (never per message in Python).

``DeliveryTally`` (owned by the ``Deliverer``): per delivered batch, the lateness of each
delivered copy (its CommitLog store time minus its key's due time) into a histogram, how many
were early (a store time before the due time: must stay 0), and deliveries per topic
(RocketMQ's ``rocketmq_timer_dequeue_total{topic}``). A RocksDB claim's raw keys are tallied
in one native pass (``rocks_timer/_native/tally.c``; :func:`tally_keys_py` is its reference);
other engines' records are tallied from their keys.

``DelayTally`` (owned by the ``Broker``, made by :func:`new_delay_tally`): the delay each timer
message was sent with (due time minus send time), RocketMQ's ``rocketmq_delay_message_latency``,
added to at every stored send, so its cost is on the send path itself: the native one
(``rocks_timer/_native/tally.c``, one C call holding the GIL, no lock) where the extension is
built, else :class:`DelayTallyPy`, its reference (the same ``add`` and ``as_dict``).
"""
from __future__ import annotations

import threading
from bisect import bisect_left
from typing import Any, Sequence

from rocks_timer.timer import keys as K
from rocks_timer.timer.store import is_column_claim

try:
    from rocks_timer._native.codec import delivery_tally as _native_tally
except ImportError:  # pragma: no cover - no C compiler at install time
    _native_tally = None
try:
    from rocks_timer._native.codec import DelayTally as _NativeDelayTally
except ImportError:  # pragma: no cover - no C compiler, or no 128-bit integers in it
    _NativeDelayTally = None

# lateness histogram bounds, ms (a bucket holds lateness <= its bound); fine at the low end,
# where the RocksDB engine delivers (p99 a few ms), up to a minute for a backlog
LATENESS_BOUNDS_MS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000,
                      30_000, 60_000)
# RocketMQ's view on rocketmq_delay_message_latency: 1 min, 10 min, 1 h, 12 h, 1 d, 3 d; rtimer
# adds 7 d and 30 d, as its delays reach timer_max_delay_sec (the RocksDB engine's months)
DELAY_BOUNDS_MS = (60_000, 600_000, 3_600_000, 43_200_000, 86_400_000, 259_200_000,
                   604_800_000, 2_592_000_000)


def tally_keys_py(raws: Sequence[bytes], store_ms: int, bounds: Sequence[int]
                  ) -> tuple[dict[bytes, int], list[int], int, int]:
    """(topics, counts, lateness sum ms, early) of delivered raw timer keys, as the native
    ``delivery_tally``: counts[i] holds lateness in (bounds[i-1], bounds[i]]."""
    topics: dict[bytes, int] = {}
    counts = [0] * (len(bounds) + 1)
    total = early = 0
    for raw in raws:
        if type(raw) is not bytes or len(raw) < K.DUE_SIZE + 1 or \
                len(raw) < K.DUE_SIZE + 1 + raw[K.DUE_SIZE]:
            raise ValueError("delivery_tally: a key is not a timer key")
        lateness = store_ms - K.key_due_ms(raw)
        total += lateness
        early += lateness < 0
        counts[bisect_left(bounds, lateness)] += 1
        topic = raw[K.DUE_SIZE + 1:K.DUE_SIZE + 1 + raw[K.DUE_SIZE]]
        topics[topic] = topics.get(topic, 0) + 1
    return topics, counts, total, early


tally_keys = _native_tally if _native_tally is not None else tally_keys_py


class Histogram:
    """Counts per bucket (``bounds``: each bucket's upper end, inclusive; one more bucket past
    the last), their sum and their number. Not locked: its owner locks."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: Sequence[int]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0
        self.count = 0

    def add_counts(self, counts: Sequence[int], total: int) -> None:
        mine = self.counts
        for i, n in enumerate(counts):
            if n:
                mine[i] += n
        self.sum += total
        self.count += sum(counts)

    def as_dict(self) -> dict[str, Any]:
        return {"bounds": list(self.bounds), "counts": list(self.counts), "sum": self.sum,
                "count": self.count}


class DeliveryTally:
    """Lateness, early deliveries and deliveries per topic of one deliverer (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.lateness = Histogram(LATENESS_BOUNDS_MS)
        self.early = 0
        self._topics: dict[bytes | str, int] = {}

    def add(self, records: Sequence[Any], store_ms: int) -> None:
        """One delivered batch whose copies were stored at ``store_ms``."""
        tokens = records.tokens if is_column_claim(records) else None  # raw keys, in order
        if tokens is not None and len(tokens) == len(records):
            topics, counts, total, early = tally_keys(tokens, store_ms, LATENESS_BOUNDS_MS)
        else:
            keys = [record.key for record in records]
            counts = [0] * (len(LATENESS_BOUNDS_MS) + 1)
            topics, total, early = {}, 0, 0
            for key in keys:
                lateness = store_ms - key.due_ms
                total += lateness
                early += lateness < 0
                counts[bisect_left(LATENESS_BOUNDS_MS, lateness)] += 1
                topics[key.topic] = topics.get(key.topic, 0) + 1
        with self._lock:
            self.lateness.add_counts(counts, total)
            self.early += early
            mine = self._topics
            for topic, n in topics.items():
                mine[topic] = mine.get(topic, 0) + n

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            by_topic: dict[str, int] = {}
            for topic, n in self._topics.items():
                name = topic.decode("utf-8", "replace") if type(topic) is bytes else topic
                by_topic[name] = by_topic.get(name, 0) + n
            return {"lateness_ms": self.lateness.as_dict(), "early": self.early,
                    "by_topic": dict(sorted(by_topic.items()))}


def new_delay_tally() -> Any:
    """The broker's tally of send delays over ``DELAY_BOUNDS_MS``: native where built."""
    if _NativeDelayTally is not None:
        return _NativeDelayTally(DELAY_BOUNDS_MS)
    return DelayTallyPy()


class DelayTallyPy:
    """The delays timer messages were sent with (see the module): the reference of the native
    ``DelayTally``, which must give the same ``as_dict`` after the same ``add`` calls."""

    def __init__(self, bounds: Sequence[int] = DELAY_BOUNDS_MS) -> None:
        self._lock = threading.Lock()
        self.delays = Histogram(bounds)

    def add(self, dues: Sequence[int], now_ms: int) -> None:
        n = len(dues)
        if n == 1:  # one send: the common case, kept to a bisect and three additions
            delay = dues[0] - now_ms
            bucket = bisect_left(self.delays.bounds, delay)
            with self._lock:
                histogram = self.delays
                histogram.counts[bucket] += 1
                histogram.sum += delay
                histogram.count += 1
            return
        if n == 0:
            return
        lo, hi = min(dues), max(dues)
        bounds = self.delays.bounds
        first = bisect_left(bounds, lo - now_ms)
        total = sum(dues) - n * now_ms
        if first == bisect_left(bounds, hi - now_ms):  # a batch sent with one delay
            with self._lock:
                histogram = self.delays
                histogram.counts[first] += n
                histogram.sum += total
                histogram.count += n
            return
        counts = [0] * (len(bounds) + 1)
        for due in dues:
            counts[bisect_left(bounds, due - now_ms)] += 1
        with self._lock:
            self.delays.add_counts(counts, total)

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return self.delays.as_dict()
