"""Named RocksDB option profiles for the ``timer`` column family, and a statistics ticker parser.

Each builder returns a *fresh* ``Options(raw_mode=True)`` with statistics enabled: RocksDB
statistics belong to the Options object and accumulate over every DB opened with it, so each
opened store gets its own. The workload all profiles serve: keys arrive in roughly random due
order, are read once in due order, then deleted in due order (a time-ordered queue).

The compaction style of a profile defines the on-disk format (RocksDB cannot switch an existing
DB between leveled and universal), so the store records it in ``meta`` and refuses a mismatch;
switching between profiles with the same style (``default``, ``blob``, ``tuned``) is allowed.

A ``vlog`` store's index (key + pointer, ARCHITECTURE §8) has its own compaction: ``universal`` for
new stores (:func:`index_options`), because leveled compaction rewrote the randomly ordered
index entries several times as much (docs/COMPACTION.md); the choice is the format setting
``format.index_compaction``.
"""
from __future__ import annotations

import re
from typing import Callable

from rocksdict import (BlockBasedOptions, DBCompactionStyle, DBCompressionType, DBRecoveryMode,
                       Options, UniversalCompactOptions)

from rocks_timer.errors import ConfigError

MiB = 1 << 20
NUM_LEVELS = 7
# RocksDB's info LOG: every open starts a new file and by default keeps 1,000 old ones of any
# size (a CLI command is an open: a busy data dir gathered thousands). A few recent ones are
# what a post-mortem reads: at most INFO_LOG_FILES files of INFO_LOG_FILE_BYTES each
INFO_LOG_FILES = 5
INFO_LOG_FILE_BYTES = 4 * MiB


def _base() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.enable_statistics()
    opts.set_keep_log_file_num(INFO_LOG_FILES)
    opts.set_max_log_file_size(INFO_LOG_FILE_BYTES)
    # cancel and the duplicate check of schedule are point lookups of mostly absent keys
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)
    opts.set_block_based_table_factory(table)
    # the same lookups against the memtable: a whole-key bloom makes a miss cheaper (BENCHMARKS.md)
    opts.set_memtable_prefix_bloom_ratio(0.1)
    opts.set_memtable_whole_key_filtering(True)
    return opts


def default_profile() -> Options:
    opts = _base()
    opts.set_compaction_style(DBCompactionStyle.level())
    opts.set_compression_type(DBCompressionType.lz4())
    return opts


def universal_profile() -> Options:
    opts = _base()
    opts.set_compaction_style(DBCompactionStyle.universal())
    opts.set_compression_type(DBCompressionType.lz4())
    universal = UniversalCompactOptions()
    universal.max_size_amplification_percent = 200
    opts.set_universal_compaction_options(universal)
    return opts


def blob_profile() -> Options:
    opts = default_profile()
    opts.set_enable_blob_files(True)
    opts.set_min_blob_size(256)
    opts.set_blob_file_size(64 * MiB)
    opts.set_enable_blob_gc(True)
    opts.set_blob_gc_age_cutoff(0.25)
    opts.set_blob_gc_force_threshold(0.5)
    return opts


def tuned_profile() -> Options:
    opts = _base()
    opts.set_compaction_style(DBCompactionStyle.level())
    opts.set_write_buffer_size(128 * MiB)
    opts.set_max_write_buffer_number(3)
    opts.set_level_compaction_dynamic_level_bytes(True)
    opts.set_num_levels(NUM_LEVELS)
    none, lz4 = DBCompressionType.none(), DBCompressionType.lz4()
    opts.set_compression_per_level([none, none] + [lz4] * (NUM_LEVELS - 2))
    # a file where 2,000 of any 10,000 consecutive entries are tombstones is compacted soon
    opts.add_compact_on_deletion_collector_factory(10_000, 2_000, 0.3)
    return opts


PROFILES: dict[str, tuple[Callable[[], Options], str]] = {
    "default": (default_profile,
                "leveled compaction, lz4 SST compression: RocksDB's balanced default, the baseline"),
    "universal": (universal_profile,
                  "universal compaction: fewer rewrites of each key (lower write amplification) "
                  "for more space held by dead data until a full merge"),
    "blob": (blob_profile,
             "leveled + blob files for values >= 256 B with blob GC: compaction moves only small "
             "keys and blob references, so large bodies are written about once"),
    "tuned": (tuned_profile,
              "leveled, 128 MiB write buffers, dynamic level bytes, no compression on L0/L1 and "
              "lz4 below, deletion-triggered compaction: fewer, cheaper rewrites of short-lived "
              "keys and tombstones reclaimed early"),
}

COMPACTION_STYLES: dict[str, str] = {
    "default": "level", "universal": "universal", "blob": "level", "tuned": "level",
}


# A vlog index keeps up to this many sorted runs before universal compaction merges them: each
# run costs a bloom probe per point lookup, each merge a rewrite (measured: docs/COMPACTION.md).
INDEX_SORTED_RUNS = 16


def index_options(profile: str, index_compaction: str) -> Options:
    """Options of the ``timer`` column family: ``profile``'s own (``index_compaction`` =
    ``profile``: the inline layout, and vlog stores made before), or ``profile``'s with
    universal compaction (``_universal_runs``)."""
    opts = build_options(profile)
    if index_compaction == "profile":
        return opts
    if index_compaction != "universal":
        raise ConfigError(f"vlog_index_compaction={index_compaction!r} is unknown; valid: "
                          f"universal, profile")
    _universal_runs(opts)
    return opts


def _universal_runs(opts: Options) -> None:
    """Universal compaction that merges runs of about equal size once ``INDEX_SORTED_RUNS``
    are there, and everything into one run when the newer runs outgrow the oldest twice over."""
    opts.set_compaction_style(DBCompactionStyle.universal())
    universal = UniversalCompactOptions()
    universal.size_ratio = 1
    universal.min_merge_width = 2
    universal.max_size_amplification_percent = 200
    opts.set_universal_compaction_options(universal)
    opts.set_level_zero_file_num_compaction_trigger(INDEX_SORTED_RUNS)
    opts.set_level_zero_slowdown_writes_trigger(3 * INDEX_SORTED_RUNS)
    opts.set_level_zero_stop_writes_trigger(4 * INDEX_SORTED_RUNS)


META_COMPACTIONS = ("level", "universal")


def meta_options(meta_compaction: str) -> Options:
    """Options of the ``meta`` column family. ``level``: RocksDB's defaults, as stores made
    before ``format.meta_compaction`` have it. ``universal`` (new stores): the due counters put
    a row per due second there, created by sends and deleted by deliveries in random order, so
    leveled compaction rewrote them again and again (docs/COMPACTION.md has the figures, and
    why ``background.META_FLUSH_EVERY``'s fewer flushes leave none)."""
    if meta_compaction == "level":
        return Options(raw_mode=True)
    if meta_compaction != "universal":
        raise ConfigError(f"format.meta_compaction {meta_compaction!r} is unknown to this build "
                          f"(it reads {', '.join(META_COMPACTIONS)})")
    opts = _base()
    _universal_runs(opts)
    return opts


def _check(name: str) -> None:
    if name not in PROFILES:
        raise ConfigError(f"rocksdb_profile={name!r} is unknown; valid profiles: "
                          f"{', '.join(sorted(PROFILES))}")


def build_options(name: str) -> Options:
    """A fresh Options object (statistics enabled) for profile ``name``.

    WAL recovery drops only a torn tail (an incomplete last record: a write that never
    returned) and refuses a damaged record with records after it: RocksDB's default
    (point-in-time) silently drops every record after the first bad one, acknowledged sends
    included (issue 30). ``rtimer repair`` salvages such a WAL on a copy instead."""
    _check(name)
    options = PROFILES[name][0]()
    options.set_wal_recovery_mode(DBRecoveryMode.tolerate_corrupted_tail_records())
    return options


def compaction_style(name: str) -> str:
    """The compaction style of profile ``name``: ``level`` or ``universal``."""
    _check(name)
    return COMPACTION_STYLES[name]


_TICKER = re.compile(r"^(rocksdb\.[\w.\-]+) COUNT : (\d+)", re.MULTILINE)


def parse_tickers(statistics: str | None) -> dict[str, int]:
    """Ticker name -> count from ``Options.get_statistics()`` text ({} when statistics are off)."""
    if not statistics:
        return {}
    return {name: int(count) for name, count in _TICKER.findall(statistics)}
