"""The Prometheus view of a running broker: RocketMQ 5's metric names and meanings, and rtimer's own.

A ``prometheus_client`` collector that reads the Broker's public figures (``stats()``, the due
snapshot, the pending count per topic, consumer offsets) and the fronts' request counts at
scrape time, so every value is the one ``stats()`` gives, with no second set of counters on the
send and delivery paths. What each RocketMQ name means here is in docs/DECISIONS.md
("Metrics and dashboard").

Labels follow RIP-46: ``cluster``, ``node_type`` ("broker") and ``node_id`` on every series;
RocketMQ's store metrics add ``storage_type`` ("local") and ``storage_medium`` ("disk"). No
``aggregation`` label: counters are cumulative (RocketMQ adds ``aggregation="delta"`` only when
it exports deltas).
"""
from __future__ import annotations

import socket
from typing import Any, Callable, Iterable, Iterator

from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily, Metric)

from rocks_timer.errors import RocksTimerError
from rocks_timer.message import WHEEL_TIMER_TOPIC
from rocks_timer.metrics.disk import MAX_AGE_S, DiskUsage

# RocketMQ's TimerMetrics distribution (5 s .. 24 h), and beyond its 24 h cap: 7 d, 30 d; the
# series timer_bound_s="+Inf" counts the rest, so the series add up to the pending count
SNAPSHOT_BOUNDS_S = (5, 60, 300, 900, 3_600, 14_400, 28_800, 86_400, 604_800, 2_592_000)
TOPIC_WALK_MAX = 200_000  # pending entries walked per scrape where an engine has no per-topic
# counters (the wheel; RocksDB reads its exact counters, complete at any size), as `stats`

# the timer engine's bytes_written components under names that say what they are
COMPONENTS = {"wal": "index_wal", "flush": "index_flush", "compaction": "index_compaction",
              "user": "index_user", "vlog": "value_segments", "vlog_relocation": "relocation"}


def default_labels(extra: dict[str, str] | None = None) -> dict[str, str]:
    """RIP-46's node labels: RocketMQ's defaults (cluster DefaultCluster, the broker named after
    its host), overridden by ``extra`` (``--metrics-label``)."""
    labels = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": socket.gethostname()}
    labels.update(extra or {})
    return labels


def store_problems(stats: dict[str, Any]) -> dict[str, int]:
    """What makes a store unhealthy, by kind, from ``stats()`` (0 each when healthy); a failure
    streak of a service (``stats()["health"]``) counts under ``service_failures``."""
    timer, log = stats["timer"], stats["commitlog"]
    return {
        "service_failures": len((stats.get("health") or {}).get("failures", ())),
        "commitlog_corrupt_regions": int(log.get("corrupt_region_count", 0)),
        "commitlog_short_segments": len(log.get("short_segments", ())),
        "commitlog_missing_segments": len(log.get("missing_segments", ())),
        "commitlog_corrupt_reads": int(log.get("corrupt_reads", 0)),
        "timer_set_aside": int(timer.get("corrupt", 0)),
        "value_segments_lost": int(timer.get("vlog_lost", 0)),
        "value_segments_short": len(timer.get("vlog_short_segments", ())),
        "value_segments_missing": len(timer.get("vlog_missing_segments", ())),
        "value_segment_sync_failures": int(timer.get("vlog_sync_failures", 0)),
        "clamped_consumer_offsets": len(stats.get("clamped_consumer_offsets", ())),
    }


def histogram_buckets(bounds: Iterable[int], counts: list[int], scale: float
                      ) -> list[tuple[str, float]]:
    """Cumulative Prometheus buckets of per-bucket ``counts`` (bounds scaled to the unit)."""
    out, running = [], 0
    for bound, n in zip(bounds, counts):
        running += n
        out.append((repr(float(bound) * scale), running))
    out.append(("+Inf", running + counts[-1]))
    return out


def _or_none(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except RocksTimerError:
        return None


class BrokerCollector:
    """Collects every series from one broker (and its fronts) at each scrape."""

    def __init__(self, broker, labels: dict[str, str],
                 fronts: dict[str, Callable[[], tuple[dict[str, int], dict[str, int]]]]
                 | None = None, popped: Callable[[], int] | None = None,
                 disk: DiskUsage | None = None):
        self.broker = broker
        self.disk = disk if disk is not None else DiskUsage(broker.path)
        self.labels = dict(labels)
        self.fronts = dict(fronts or {})  # name -> request_counts()
        self.popped = popped  # messages received through the gRPC front (pop), if it runs

    def describe(self) -> list[Metric]:
        return []  # collected at scrape time only (registering does not call ``collect``)

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        stats = broker.stats()
        # a damaged timer store may not answer these: their series are left out (stats()
        # reports the damage in ``health``, which rtimer_service_failures shows)
        snapshot = _or_none(lambda: broker.due_snapshot(SNAPSHOT_BOUNDS_S)) or {}
        by_topic, complete = _or_none(lambda: broker.pending_by_topic(TOPIC_WALK_MAX)) or ({},
                                                                                           False)
        disk = self.disk.figures()
        yield from self._rocketmq_store(stats, snapshot, by_topic, complete, disk)
        yield from self._rocketmq_broker(stats)
        yield from self._rtimer(stats, disk)

    # -- helpers ----------------------------------------------------------------------------
    def _family(self, kind, name: str, doc: str, extra: tuple[str, ...] = (),
                store: bool = False, unit: str = ""):
        names = list(self.labels) + (["storage_type", "storage_medium"] if store else []) + \
            list(extra)
        family = kind(name, doc, labels=names, unit=unit)
        base = list(self.labels.values()) + (["local", "disk"] if store else [])
        return family, base

    # -- RocketMQ's store metrics (DefaultStoreMetricsConstant) ---------------------------
    def _rocketmq_store(self, stats, snapshot, by_topic, complete, disk) -> Iterator[Metric]:
        broker, timer, log = self.broker, stats["timer"], stats["commitlog"]
        fam, base = self._family(GaugeMetricFamily, "rocketmq_storage_size",
                                 "Space in use on the file system of the data dir, bytes "
                                 f"(RocketMQ's meaning; read at most every {MAX_AGE_S:g} s: "
                                 "rtimer_disk_figures_age_seconds)", store=True)
        fam.add_metric(base, disk.used_bytes)
        yield fam
        fam, base = self._family(GaugeMetricFamily, "rocketmq_storage_flush_behind_bytes",
                                 "CommitLog bytes written and not yet synced to disk", store=True)
        fam.add_metric(base, max(0, log["max_offset"] - log.get("synced_offset", log["max_offset"])))
        yield fam

        wheel = stats["engine"] == "wheel"
        # the RocksDB and memory engines store a timer message in the send's own write: nothing
        # waits to be enqueued; the file wheel enqueues from its CommitLog topic
        lag = broker.max_offset(WHEEL_TIMER_TOPIC, 0) - int(timer.get("queue_offset", 0)) \
            if wheel else 0
        fam, base = self._family(GaugeMetricFamily, "rocketmq_timer_enqueue_lag",
                                 "Timer messages sent and not yet in the timer engine's index",
                                 store=True)
        fam.add_metric(base, max(0, lag))
        yield fam
        if not wheel:
            fam, base = self._family(GaugeMetricFamily, "rocketmq_timer_enqueue_latency",
                                     "How far the timer enqueue is behind, milliseconds (0: "
                                     "a send is indexed in its own write)", store=True)
            fam.add_metric(base, 0)
            yield fam
        fam, base = self._family(GaugeMetricFamily, "rocketmq_timer_dequeue_lag",
                                 "Pending timer messages due before the next whole second, not "
                                 "yet delivered (in flight included)", store=True)
        if stats["due"] is not None:
            fam.add_metric(base, stats["due"]["buckets"]["now"])
        yield fam
        fam, base = self._family(GaugeMetricFamily, "rocketmq_timer_dequeue_latency",
                                 "Now minus the due time of the earliest pending timer message "
                                 "if it is due, milliseconds", store=True)
        if stats["lag_ms"] is not None:
            fam.add_metric(base, stats["lag_ms"])
        yield fam
        fam, base = self._family(GaugeMetricFamily, "rocketmq_timing_messages",
                                 "Pending timer messages per topic" +
                                 ("" if complete else f" (first {TOPIC_WALK_MAX} in due order "
                                                      "only: rtimer_timing_messages_complete 0)"),
                                 extra=("topic",), store=True)
        for topic, count in by_topic.items():
            fam.add_metric(base + [topic], count)
        yield fam
        fam, base = self._family(GaugeMetricFamily, "rtimer_timing_messages_complete",
                                 "1 if rocketmq_timing_messages counts every pending message")
        fam.add_metric(base, 1 if complete else 0)
        yield fam
        fam, base = self._family(CounterMetricFamily, "rocketmq_timer_enqueue_total",
                                 "Timer messages stored in the timer engine by sends since start",
                                 store=True)
        fam.add_metric(base, stats["sent"]["timer"])
        yield fam
        fam, base = self._family(CounterMetricFamily, "rocketmq_timer_dequeue_total",
                                 "Timer messages delivered to their topic since start",
                                 extra=("topic",), store=True)
        for topic, count in stats["deliveries"]["by_topic"].items():
            fam.add_metric(base + [topic], count)
        yield fam
        fam, base = self._family(GaugeMetricFamily, "rocketmq_timer_message_snapshot",
                                 "Pending timer messages by due time from now: timer_bound_s=b "
                                 "counts [previous bound, b) seconds, +Inf the rest (no 24 h cap)",
                                 extra=("timer_bound_s",), store=True)
        for bound, count in snapshot.items():
            fam.add_metric(base + ["+Inf" if bound is None else str(bound)], count)
        yield fam
        delays = stats["send_delays_ms"]
        fam, base = self._family(HistogramMetricFamily, "rocketmq_delay_message_latency",
                                 "Delay timer messages were sent with (due time minus send "
                                 "time), seconds", store=True)
        fam.add_metric(base, histogram_buckets(delays["bounds"], delays["counts"], 1e-3),
                       delays["sum"] / 1000)
        yield fam

    # -- RocketMQ's broker metrics (BrokerMetricsConstant) --------------------------------
    def _rocketmq_broker(self, stats) -> Iterator[Metric]:
        sent = stats["sent"]
        fam, base = self._family(CounterMetricFamily, "rocketmq_messages_in_total",
                                 "Messages sent to the broker since start",
                                 extra=("message_type",))
        fam.add_metric(base + ["normal"], sent["immediate"])
        fam.add_metric(base + ["delay"], sent["level"] + sent["timer"])
        yield fam
        fam, base = self._family(CounterMetricFamily, "rocketmq_messages_out_total",
                                 "Messages handed to consumers since start",
                                 extra=("consume_mode",))
        fam.add_metric(base + ["pull"], stats["commitlog"].get("messages_read", 0))
        if self.popped is not None:
            fam.add_metric(base + ["pop"], self.popped())
        yield fam
        fam, base = self._family(GaugeMetricFamily, "rocketmq_consumer_lag_messages",
                                 "Messages in a topic's queues past a group's committed offset",
                                 extra=("topic", "consumer_group"))
        lags: dict[tuple[str, str], int] = {}
        for (topic, group, queue_id), offset in self.broker.consumer_offsets.table().items():
            behind = max(0, self.broker.max_offset(topic, queue_id) - offset)
            lags[(topic, group)] = lags.get((topic, group), 0) + behind
        for (topic, group), behind in sorted(lags.items()):
            fam.add_metric(base + [topic, group], behind)
        yield fam

    # -- rtimer's own -----------------------------------------------------------------------
    def _rtimer(self, stats, disk) -> Iterator[Metric]:
        timer, engine = stats["timer"], stats["engine"]
        fam, base = self._family(GaugeMetricFamily, "rtimer_pending_messages",
                                 "Pending timer messages", extra=("engine",))
        if stats["pending"] is not None:
            fam.add_metric(base + [engine], stats["pending"])
        yield fam
        fam, base = self._family(GaugeMetricFamily, "rtimer_pending_by_due",
                                 "Pending timer messages by due bucket (now, minute, hour, day, "
                                 "week, later; as rtimer stats --due)", extra=("engine", "bucket"))
        for bucket, count in (stats["due"] or {"buckets": {}})["buckets"].items():
            fam.add_metric(base + [engine, bucket], count)
        yield fam
        for name, key, doc in (
                ("rtimer_timer_delivered", "delivered", "Timer messages delivered since start"),
                ("rtimer_cancelled", "cancelled", "Timer messages cancelled since start"),
                ("rtimer_rescheduled", "rescheduled", "Timer messages rescheduled since start"),
                ("rtimer_failed_puts", "failed_puts",
                 "Delivery puts that failed and were retried since start")):
            fam, base = self._family(CounterMetricFamily, name + "_total", doc, extra=("engine",))
            fam.add_metric(base + [engine], stats[key])
            yield fam
        fam, base = self._family(GaugeMetricFamily, "rtimer_in_flight_messages",
                                 "Timer messages claimed for delivery and not yet completed",
                                 extra=("engine",))
        fam.add_metric(base + [engine], stats["in_flight"])
        yield fam
        deliveries = stats["deliveries"]
        late = deliveries["lateness_ms"]
        fam, base = self._family(HistogramMetricFamily, "rtimer_delivery_lateness_seconds",
                                 "Store time of a delivered copy minus its due time",
                                 extra=("engine",))
        fam.add_metric(base + [engine], histogram_buckets(late["bounds"], late["counts"], 1e-3),
                       late["sum"] / 1000)
        yield fam
        fam, base = self._family(CounterMetricFamily, "rtimer_early_deliveries_total",
                                 "Timer messages stored in their topic before their due time "
                                 "(must stay 0)", extra=("engine",))
        fam.add_metric(base + [engine], deliveries["early"])
        yield fam
        fam, base = self._family(CounterMetricFamily, "rtimer_bytes_written_total",
                                 "Bytes written per component since start (logical, as each "
                                 "part counts them)", extra=("engine", "component"))
        for component, count in timer.get("bytes_written", {}).items():
            fam.add_metric(base + [engine, COMPONENTS.get(component, component)], count)
        fam.add_metric(base + [engine, "commitlog"], stats["commitlog"]["commitlog_bytes"])
        fam.add_metric(base + [engine, "consumequeue"], stats["commitlog"]["consumequeue_bytes"])
        yield fam
        if "vlog_live_fraction" in timer:
            fam, base = self._family(GaugeMetricFamily, "rtimer_value_segment_live_fraction",
                                     "Live bytes over bytes held in value segments",
                                     extra=("engine",))
            fam.add_metric(base + [engine], timer["vlog_live_fraction"])
            yield fam
        fam, base = self._family(GaugeMetricFamily, "rtimer_set_aside_messages",
                                 "Timer messages set aside as damaged (never delivered; "
                                 "rtimer check names them)", extra=("engine",))
        fam.add_metric(base + [engine], int(timer.get("corrupt", 0)))
        yield fam
        problems = store_problems(stats)
        fam, base = self._family(GaugeMetricFamily, "rtimer_store_problems",
                                 "Damage found in the data dir, by kind (0 when healthy)",
                                 extra=("kind",))
        for kind, count in problems.items():
            fam.add_metric(base + [kind], count)
        yield fam
        fam, base = self._family(GaugeMetricFamily, "rtimer_service_failures",
                                 "Failures in a row of a broker service that keeps failing "
                                 "(stats()['health']), by where and error type",
                                 extra=("where", "error_type"))
        for failure in (stats.get("health") or {}).get("failures", ()):
            fam.add_metric(base + [failure["where"], failure["error_type"]], failure["count"])
        yield fam
        fam, base = self._family(GaugeMetricFamily, "rtimer_store_healthy",
                                 "1 when no rtimer_store_problems kind is above 0")
        fam.add_metric(base, 0 if any(problems.values()) else 1)
        yield fam
        fam, base = self._family(GaugeMetricFamily, "rtimer_data_dir_bytes",
                                 "Bytes the data dir's files take on disk (a walk of the dir "
                                 f"at most every {MAX_AGE_S:g} s: rtimer_disk_figures_age_seconds)")
        fam.add_metric(base, disk.dir_bytes)
        yield fam
        fam, base = self._family(GaugeMetricFamily, "rtimer_disk_figures_age_seconds",
                                 "How old rtimer_data_dir_bytes and rocketmq_storage_size are "
                                 "(they are read again when this reaches "
                                 f"{MAX_AGE_S:g})")
        fam.add_metric(base, disk.age_s)
        yield fam
        opened = stats["open"]
        fam, base = self._family(GaugeMetricFamily, "rtimer_open_seconds",
                                 "How long opening the data dir took at start")
        fam.add_metric(base, opened["open_ms"] / 1000)
        yield fam
        fam, base = self._family(GaugeMetricFamily, "rtimer_recovery_seconds",
                                 "How long the open took if the last run did not stop cleanly "
                                 "(the recovery), else 0")
        fam.add_metric(base, 0 if opened["previous_stop_clean"] else opened["open_ms"] / 1000)
        yield fam
        fam, base = self._family(GaugeMetricFamily, "rtimer_previous_stop_clean",
                                 "1 if the run before this one closed the data dir cleanly")
        fam.add_metric(base, 1 if opened["previous_stop_clean"] else 0)
        yield fam
        levels = stats.get("levels")
        if levels:
            fam, base = self._family(GaugeMetricFamily, "rtimer_level_pending_messages",
                                     "Messages waiting on a delay level", extra=("level",))
            for level, count in levels.get("pending", {}).items():
                fam.add_metric(base + [str(level)], count)
            yield fam
        req = CounterMetricFamily("rtimer_front_requests", "Requests a front answered since "
                                  "start", labels=list(self.labels) + ["front", "method"])
        err = CounterMetricFamily("rtimer_front_errors", "Requests a front answered with an "
                                  "error since start", labels=list(self.labels) + ["front", "method"])
        base = list(self.labels.values())
        for front, counts in sorted(self.fronts.items()):
            requests, errors = counts()
            for method, count in sorted(requests.items()):
                req.add_metric(base + [front, method], count)
                err.add_metric(base + [front, method], errors.get(method, 0))
        yield req
        yield err
