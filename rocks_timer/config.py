"""``BrokerConfig``: one frozen dataclass with defaults, ``validate()``, and loaders.

Loadable from a TOML file (snake_case keys, top level or under ``[broker]``) or from a RocketMQ
``broker.conf`` (``key=value`` with RocketMQ's camelCase names). Unknown keys are an error that
lists the valid ones.
"""
from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from rocks_timer.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevelTable
from rocks_timer.errors import ConfigError

TIMER_ENGINES = ("rocksdb", "wheel", "memory")
FLUSH_MODES = ("async", "sync")
ROCKSDB_LAYOUTS = ("inline", "vlog")
VLOG_INDEX_COMPACTIONS = ("universal", "profile")
MiB = 1 << 20
DAY_MS = 86_400_000


@dataclass(frozen=True)
class BrokerConfig:
    """Every setting of a broker; RocketMQ's name for each is in ``ROCKETMQ_NAMES``."""

    # timer engines
    timer_engine: str = "rocksdb"
    timer_precision_ms: int = 100
    timer_max_delay_sec: int = 259_200
    timer_roll_window_slots: int | None = None  # None: 2 days of slots at the precision
    timer_flush_interval_ms: int = 1_000
    timer_deliver_batch: int = 2_000  # measured: docs/BENCHMARKS.md (burst), DECISIONS.md
    timer_deliver_max_bytes: int = 8 * MiB
    timer_max_in_flight: int = 8_000
    timer_put_retry_max_backoff_ms: int = 60_000
    timer_compress_threshold: int = 512
    timer_congest_num_each_slot: int = 2**31 - 1  # wheel flow control; RocketMQ's default: off
    rocksdb_profile: str = "blob"  # measured best for write amplification: docs/COMPACTION.md
    rocksdb_sync: bool = False
    # vlog layout (docs/ARCHITECTURE.md §8): bodies in value segments, RocksDB keeps pointers
    rocksdb_layout: str = "vlog"  # for new stores; a store keeps the layout it was made with
    vlog_segment_bytes: int = 64 * MiB
    # encoded values up to this stay in the index only; 0: every body is in the value segments,
    # which makes the index rebuildable from them (`rtimer repair`, issue 30)
    vlog_inline_max_bytes: int = 0
    vlog_reclaim_live_pct: int = 25  # theta: relocate a sealed segment below this live %
    vlog_reclaim_age_sec: int = 0  # A: relocate a sealed segment older than this (0: off)
    vlog_reclaim_min_pinned_sec: int = 21_600  # never relocate a segment that empties sooner
    vlog_prefetch_ms: int = 2_000  # hint the kernel to read bodies due this soon
    # a new vlog store's index: universal compaction, or rocksdb_profile's (docs/COMPACTION.md)
    vlog_index_compaction: str = "universal"
    # legacy delay levels
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    enable_schedule_async_deliver: bool = False
    schedule_async_deliver_max_pending_limit: int = 2_000
    schedule_async_deliver_max_resend_num2_blocked: int = 3
    flush_delay_offset_interval_ms: int = 10_000
    # CommitLog / ConsumeQueue
    max_message_size: int = 4 * MiB
    commitlog_segment_size: int = 64 * MiB
    consume_queue_entries_per_file: int = 300_000
    flush_disk_type: str = "async"
    flush_interval_ms: int = 500  # async mode: everything acknowledged is fsynced this often
    file_reserved_hours: int = 72
    # background services that keep failing (rocks_timer.health): the failing loop's wait
    # doubles up to this, and each failure kind gets one log line per interval
    service_retry_max_backoff_ms: int = 10_000
    failure_log_interval_ms: int = 60_000

    # -- derived values --------------------------------------------------------------------
    @property
    def delay_levels(self) -> DelayLevelTable:
        return DelayLevelTable.parse(self.message_delay_level)

    @property
    def max_delay_ms(self) -> int:
        return self.timer_max_delay_sec * 1000

    @property
    def roll_window_slots(self) -> int:
        if self.timer_roll_window_slots is None:
            return 2 * DAY_MS // self.timer_precision_ms
        return self.timer_roll_window_slots

    def replace(self, **changes: Any) -> "BrokerConfig":
        return dataclasses.replace(self, **changes).validate()

    # -- validation ------------------------------------------------------------------------
    def validate(self) -> "BrokerConfig":
        def need(ok: bool, name: str, allowed: str) -> None:
            if not ok:
                raise ConfigError(f"{name}={getattr(self, name)!r} is invalid; allowed: {allowed}")

        for f in fields(self):
            value = getattr(self, f.name)
            expected = _field_type(f)
            if expected is bool and not isinstance(value, bool):
                raise ConfigError(f"{f.name}={value!r} is invalid; allowed: true or false")
            if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
                if not (f.name == "timer_roll_window_slots" and value is None):
                    raise ConfigError(f"{f.name}={value!r} is invalid; allowed: an integer")
        need(self.timer_engine in TIMER_ENGINES, "timer_engine", ", ".join(TIMER_ENGINES))
        need(10 <= self.timer_precision_ms <= 60_000, "timer_precision_ms", "10..60000 ms")
        need(1 <= self.timer_max_delay_sec <= 10 * 365 * 86_400, "timer_max_delay_sec",
             "1..315360000 s")
        need(self.timer_roll_window_slots is None or self.timer_roll_window_slots >= 1,
             "timer_roll_window_slots", ">= 1, or unset for 2 days")
        need(self.timer_flush_interval_ms >= 1, "timer_flush_interval_ms", ">= 1 ms")
        need(1 <= self.timer_deliver_batch <= 1_000_000, "timer_deliver_batch", "1..1000000")
        need(self.timer_deliver_max_bytes >= 1024, "timer_deliver_max_bytes", ">= 1024")
        need(1 <= self.timer_max_in_flight <= 1_000_000, "timer_max_in_flight", "1..1000000")
        need(100 <= self.timer_put_retry_max_backoff_ms <= 3_600_000,
             "timer_put_retry_max_backoff_ms", "100..3600000 ms")
        need(self.timer_compress_threshold >= 0, "timer_compress_threshold", ">= 0 bytes")
        need(1 <= self.timer_congest_num_each_slot <= 2**31 - 1, "timer_congest_num_each_slot",
             "1..2147483647 (the maximum turns flow control off)")
        need(bool(re.fullmatch(r"[a-z0-9_]+", self.rocksdb_profile)), "rocksdb_profile",
             "a profile name such as default, universal, blob")
        need(self.rocksdb_layout in ROCKSDB_LAYOUTS, "rocksdb_layout", ", ".join(ROCKSDB_LAYOUTS))
        need(64 * 1024 <= self.vlog_segment_bytes <= 1 << 32, "vlog_segment_bytes",
             "65536..4294967296 bytes")
        need(0 <= self.vlog_inline_max_bytes <= 65_536, "vlog_inline_max_bytes", "0..65536 bytes")
        need(0 <= self.vlog_reclaim_live_pct <= 100, "vlog_reclaim_live_pct",
             "0..100 (0: never relocate by live fraction)")
        need(self.vlog_reclaim_age_sec >= 0, "vlog_reclaim_age_sec", ">= 0 s (0: off)")
        need(self.vlog_reclaim_min_pinned_sec >= 0, "vlog_reclaim_min_pinned_sec", ">= 0 s")
        need(0 <= self.vlog_prefetch_ms <= 3_600_000, "vlog_prefetch_ms", "0..3600000 ms")
        need(self.vlog_index_compaction in VLOG_INDEX_COMPACTIONS, "vlog_index_compaction",
             ", ".join(VLOG_INDEX_COMPACTIONS))
        self.delay_levels  # raises ConfigError naming the bad element
        need(self.schedule_async_deliver_max_pending_limit >= 1,
             "schedule_async_deliver_max_pending_limit", ">= 1")
        need(self.schedule_async_deliver_max_resend_num2_blocked >= 0,
             "schedule_async_deliver_max_resend_num2_blocked", ">= 0")
        need(self.flush_delay_offset_interval_ms >= 1, "flush_delay_offset_interval_ms", ">= 1 ms")
        need(1 <= self.max_message_size <= 64 * MiB, "max_message_size", "1..67108864 bytes")
        need(self.commitlog_segment_size >= self.max_message_size + 32 * 1024,
             "commitlog_segment_size", f">= max_message_size + 32 KiB "
             f"({self.max_message_size + 32 * 1024})")
        need(self.commitlog_segment_size <= 1 << 34, "commitlog_segment_size", "<= 16 GiB")
        need(1 <= self.consume_queue_entries_per_file <= 10_000_000,
             "consume_queue_entries_per_file", "1..10000000")
        need(self.flush_disk_type in FLUSH_MODES, "flush_disk_type", ", ".join(FLUSH_MODES))
        need(1 <= self.flush_interval_ms <= 60_000, "flush_interval_ms", "1..60000 ms")
        need(self.file_reserved_hours >= 1, "file_reserved_hours", ">= 1 hour")
        need(100 <= self.service_retry_max_backoff_ms <= 3_600_000,
             "service_retry_max_backoff_ms", "100..3600000 ms")
        need(1_000 <= self.failure_log_interval_ms <= 86_400_000, "failure_log_interval_ms",
             "1000..86400000 ms")
        return self

    # -- loaders ---------------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "BrokerConfig":
        valid = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - valid)
        if unknown:
            raise ConfigError(
                f"unknown config key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(valid))}"
            )
        return cls(**values).validate()

    @classmethod
    def from_toml(cls, path: str | Path) -> "BrokerConfig":
        return cls.from_mapping(_toml_values(path))

    @classmethod
    def from_broker_conf(cls, path: str | Path) -> "BrokerConfig":
        return cls.from_mapping(_broker_conf_values(path))

    @classmethod
    def read_values(cls, path: str | Path) -> dict[str, Any]:
        """The settings a config file gives, by field name (what it leaves out is absent):
        TOML for ``*.toml``, RocketMQ ``key=value`` for anything else (``broker.conf``)."""
        return _toml_values(path) if str(path).endswith(".toml") else _broker_conf_values(path)

    @classmethod
    def load(cls, path: str | Path) -> "BrokerConfig":
        """TOML for ``*.toml``, RocketMQ ``key=value`` for anything else (``broker.conf``)."""
        return cls.from_mapping(cls.read_values(path))


def _read_text(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {exc.object[exc.start]:#04x}"
                          f" at position {exc.start})") from None


def _toml_values(path: str | Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(_read_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    if set(data) == {"broker"} and isinstance(data["broker"], dict):
        data = data["broker"]
    return data


def _broker_conf_values(path: str | Path) -> dict[str, Any]:
    text = _read_text(path)
    values: dict[str, Any] = {}
    by_name = _rocketmq_name_table()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ConfigError(f"{path}:{number}: expected key=value, got {raw!r}")
        if key not in by_name:
            raise ConfigError(
                f"{path}:{number}: unknown key {key!r}; valid keys: {', '.join(sorted(by_name))}"
            )
        name, convert = by_name[key]
        values[name] = convert(name, value)
    return values


def _field_type(f: dataclasses.Field) -> type:
    text = str(f.type)
    if text.startswith("bool"):
        return bool
    if text.startswith("int"):
        return int
    return str


def _to_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _convert(name: str, text: str) -> Any:
    kind = _field_type(next(f for f in fields(BrokerConfig) if f.name == name))
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ConfigError(f"{name}={text!r} is invalid; allowed: true or false")
        return text.lower() == "true"
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{name}={text!r} is invalid; allowed: an integer") from None
    return text


def _flush_disk_type(name: str, text: str) -> str:
    mapping = {"ASYNC_FLUSH": "async", "SYNC_FLUSH": "sync", "async": "async", "sync": "sync"}
    if text not in mapping:
        raise ConfigError(f"flushDiskType={text!r} is invalid; allowed: ASYNC_FLUSH, SYNC_FLUSH")
    return mapping[text]


def _cq_entries(name: str, text: str) -> int:
    return max(1, _convert("consume_queue_entries_per_file", text) // 20)


# RocketMQ names whose meaning or unit differs from ours; every other field is its camelCase.
ROCKETMQ_NAMES: dict[str, tuple[str, Any]] = {
    "timerRollWindowSlot": ("timer_roll_window_slots", _convert),
    "fileReservedTime": ("file_reserved_hours", _convert),
    "mappedFileSizeCommitLog": ("commitlog_segment_size", _convert),
    "mappedFileSizeConsumeQueue": ("consume_queue_entries_per_file", _cq_entries),
    "flushDiskType": ("flush_disk_type", _flush_disk_type),
    "flushIntervalCommitLog": ("flush_interval_ms", _convert),
    "flushDelayOffsetInterval": ("flush_delay_offset_interval_ms", _convert),
    "scheduleAsyncDeliverMaxResendNum2Blocked":
        ("schedule_async_deliver_max_resend_num2_blocked", _convert),
}


def _rocketmq_name_table() -> dict[str, tuple[str, Any]]:
    table = {_to_camel(f.name): (f.name, _convert) for f in fields(BrokerConfig)}
    for name, _ in ROCKETMQ_NAMES.values():
        table.pop(_to_camel(name), None)
    table.update(ROCKETMQ_NAMES)
    return table
