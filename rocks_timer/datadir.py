"""What a data directory remembers about itself: ``config/engine.json``.

    {"timer_engine": "wheel", "commitlog_segment_size": 67108864,
     "consume_queue_entries_per_file": 300000, "timer_precision_ms": 100}

The timer engine and the settings that define the on-disk format of the broker's own files
(the CommitLog segment size, the ConsumeQueue file size; the wheel's precision, which sizes its
slots) are written when a data dir is first opened. A later open with a configuration that says
otherwise is a ``ConfigError`` naming both values, never a silent reinterpretation;
``Broker.open(path)`` without a configuration, and the CLI for every setting its ``--config``
file and ``--engine`` leave unsaid, take the stored values (:func:`adopt`). The RocksDB engine
keeps its own format settings in its ``meta`` column family, the wheel in
``wheel/config/format.json``.

A data dir whose record predates a setting gets it added on its next successful open. The
``memory`` engine keeps nothing on disk, so a data dir it made takes the next engine that opens
it.
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, Iterable

from rocks_timer.config import BrokerConfig
from rocks_timer.errors import ConfigError
from rocks_timer.fileio import replace_durably
from rocks_timer.private import private_dir

log = logging.getLogger(__name__)
FILE = Path("config") / "engine.json"
BROKER_FORMAT = ("commitlog_segment_size", "consume_queue_entries_per_file")
ENGINE_FORMAT = {"wheel": ("timer_precision_ms",)}


def format_fields(engine: str) -> tuple[str, ...]:
    return ("timer_engine", *BROKER_FORMAT, *ENGINE_FORMAT.get(engine, ()))


def read_format(data_dir: Path | str) -> dict[str, Any] | None:
    """The stored record, None for a data dir that has none; a damaged record is a clear
    ``ConfigError`` saying what to do."""
    path = Path(data_dir) / FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return _inferred(Path(data_dir), path)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        stored = json.loads(raw.decode("utf-8"))
    except ValueError:
        stored = None
    valid = {f: int for f in BROKER_FORMAT} | {"timer_precision_ms": int, "timer_engine": str}
    if not isinstance(stored, dict) or not isinstance(stored.get("timer_engine"), str) or any(
            name not in valid for name in stored) or any(
            name in stored and (not isinstance(stored[name], kind)
                                or isinstance(stored[name], bool))
            for name, kind in valid.items()):
        raise ConfigError(
            f"{path} is damaged ({len(raw)} bytes, not the data dir's engine record, or one "
            "written by a newer rtimer); rewrite it "
            'as {"timer_engine": "<rocksdb|wheel>"} naming the engine whose files the data dir '
            "holds (timer-rocksdb/ or wheel/), then run `rtimer check`")
    return stored


ENGINE_DIRS = {"rocksdb": "timer-rocksdb", "wheel": "wheel"}


def engines_with_files(data_dir: Path) -> list[str]:
    """The timer engines whose directory in ``data_dir`` holds files."""
    return [engine for engine, sub in ENGINE_DIRS.items()
            if (data_dir / sub).is_dir() and any((data_dir / sub).iterdir())]


def _inferred(data_dir: Path, path: Path) -> dict[str, Any] | None:
    """A data dir whose record is missing but which holds an engine's files: that engine (so
    a lost record never strands pending messages under a fresh store of the default engine)."""
    found = engines_with_files(data_dir)
    if not found:
        return None
    if len(found) > 1:
        raise ConfigError(f"{path} is missing and {data_dir} holds files of both timer engines "
                          '(timer-rocksdb/ and wheel/); write {"timer_engine": "<rocksdb|wheel>"}'
                          " into it naming the engine it ran")
    inferred: dict[str, Any] = {"timer_engine": found[0]}
    # segment and file sizes: the gcd of the files' start offsets (names) where there are some
    starts = [int(p.name) for p in (data_dir / "commitlog").glob("[0-9]" * 20)]
    if math.gcd(*starts):
        inferred["commitlog_segment_size"] = math.gcd(*starts)
    starts = [int(p.name) for p in (data_dir / "consumequeue").glob("*/*/" + "[0-9]" * 20)]
    if math.gcd(*starts):
        inferred["consume_queue_entries_per_file"] = math.gcd(*starts) // 20
    try:
        wheel = json.loads((data_dir / "wheel" / "config" / "format.json").read_text("utf-8"))
        if found[0] == "wheel" and isinstance(wheel.get("precision_ms"), int):
            inferred["timer_precision_ms"] = wheel["precision_ms"]
    except (OSError, ValueError, AttributeError):
        pass
    log.warning("%s is missing; from the data dir's files: %s", path, inferred)
    return inferred


def adopt(data_dir: Path | str, config: BrokerConfig, explicit: Iterable[str] = ()
          ) -> BrokerConfig:
    """``config`` with every stored format setting not in ``explicit`` taken from the data dir."""
    stored = read_format(data_dir)
    if not stored:
        return config
    explicit = set(explicit)
    engine = stored["timer_engine"]
    if engine == "memory":
        return config
    changes = {"timer_engine": engine} if "timer_engine" not in explicit else {}
    target = changes.get("timer_engine", config.timer_engine)
    for name in (*BROKER_FORMAT, *ENGINE_FORMAT.get(target, ())):
        if name in stored and name not in explicit and target == engine:
            changes[name] = stored[name]
    segment = changes.get("commitlog_segment_size", config.commitlog_segment_size)
    if "max_message_size" not in explicit and config.max_message_size + 32 * 1024 > segment:
        changes["max_message_size"] = segment - 32 * 1024  # what the stored segments can hold
    return config.replace(**changes) if changes else config


def check(data_dir: Path | str, config: BrokerConfig) -> dict[str, Any] | None:
    """Refuse a configuration that contradicts the stored record; returns the record."""
    path = Path(data_dir) / FILE
    stored = read_format(data_dir)
    holding = engines_with_files(Path(data_dir))
    if holding and config.timer_engine not in holding:
        # a flag (--engine memory) or an edited record must never hide pending messages
        raise ConfigError(f"data dir {data_dir} was created with timer_engine={holding[0]!r} "
                          f"(its files are in {ENGINE_DIRS[holding[0]]}/); it cannot be opened with "
                          f"timer_engine={config.timer_engine!r} (its pending messages would be "
                          f"hidden); leave --engine out, or move {ENGINE_DIRS[holding[0]]}/ away "
                          f"first to start over")
    if not stored:
        return stored
    engine = stored["timer_engine"]
    if engine == "memory" or config.timer_engine == "memory":
        return stored
    if engine != config.timer_engine:
        raise ConfigError(f"data dir {data_dir} was created with timer_engine={engine!r}; it "
                          f"cannot be opened with {config.timer_engine!r} (its pending messages "
                          f"would be stranded; the record is {path})")
    for name in format_fields(engine)[1:]:
        if name in stored and stored[name] != getattr(config, name):
            raise ConfigError(f"data dir {data_dir} was created with {name}={stored[name]!r}; "
                              f"this configuration has {name}={getattr(config, name)!r} (the "
                              "files are laid out for the first; leave the setting out to use it)")
    return stored


def record(data_dir: Path | str, config: BrokerConfig, stored: dict[str, Any] | None) -> None:
    """Write the record (crash-safely) when it is missing, incomplete or made by ``memory``."""
    if config.timer_engine == "memory" and stored:
        return
    wanted = {name: getattr(config, name) for name in format_fields(config.timer_engine)}
    path = Path(data_dir) / FILE
    if stored and stored["timer_engine"] != "memory" and all(k in stored for k in wanted) \
            and path.exists():
        return
    private_dir(path.parent)
    replace_durably(path, json.dumps(wanted, sort_keys=True).encode("ascii"))
