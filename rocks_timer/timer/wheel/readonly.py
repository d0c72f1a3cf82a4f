"""The wheel's files looked at read-only (``ReadOnlyView``, ``rtimer check`` without a running
broker): the format record, the wheel file's size, the checkpoint, and every TimerLog unit. The
wheel's own open revises slots and cuts torn TimerLog tails, so it is not used here; these reads
open nothing for writing (the TimerLog through ``O_RDONLY`` descriptors)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rocks_timer.config import BrokerConfig
from rocks_timer.errors import ConfigError, CorruptRecordError
from rocks_timer.timer.wheel.checkpoint import TimerCheckpointFile
from rocks_timer.timer.wheel.layouts import SLOT_SIZE, slots_total_for, snap_precision
from rocks_timer.timer.wheel.timerlog import TimerLog, _Segment

DEFAULT_TIMERLOG_SEGMENT = 64 << 20  # engine.DEFAULT_TIMERLOG_SEGMENT (the engine's default)


class _ReadOnlyTimerLog(TimerLog):
    """A TimerLog whose segments are opened ``O_RDONLY`` and never created, nor synced on
    close."""

    def _add_segment(self, start: int, written: int = 0) -> _Segment:
        path = self.directory / f"{start:020d}"
        segment = _Segment(start, path, os.open(path, os.O_RDONLY), written)
        self._segments.append(segment)
        self._starts.append(start)
        return segment

    def close(self) -> None:
        with self._lock:
            for segment in self._segments:
                os.close(segment.fd)
            self._segments.clear()
            self._closed = True


class ReadOnlyWheel:
    """What ``check_view`` asks of the timer engine, for the wheel's files."""

    name = "wheel"

    def __init__(self, root: Path, config: BrokerConfig):
        self.root = Path(root)
        self.problems: list[str] = []
        p = snap_precision(config.timer_precision_ms)
        slots_total = slots_total_for(p)
        self._format(p, slots_total)
        wheel = self.root / "timerwheel"
        want = 2 * slots_total * SLOT_SIZE
        if wheel.exists() and wheel.stat().st_size not in (0, want):
            self.problems.append(f"timer wheel {wheel} is {wheel.stat().st_size} bytes; this "
                                 f"configuration (precision {p} ms, {slots_total} slots) needs "
                                 f"{want} bytes")
        try:
            TimerCheckpointFile(self.root / "config" / "timercheck").load()
        except CorruptRecordError as exc:
            self.problems.append(str(exc))
        self.units = 0
        log_dir = self.root / "timerlog"
        if log_dir.is_dir():
            try:
                timerlog = _ReadOnlyTimerLog(log_dir, DEFAULT_TIMERLOG_SEGMENT)
            except (ConfigError, OSError) as exc:
                self.problems.append(str(exc))
            else:
                try:
                    self.units = sum(1 for _ in timerlog.scan_units(timerlog.min_offset))
                    self.problems += [f"timerlog: {length} corrupt bytes at offset {offset} "
                                      "skipped" for offset, length in sorted(timerlog.damage.items())]
                    self.problems += [f"timerlog segment {name} is missing"
                                      for name in timerlog.missing_segments]
                    self.problems += [f"timerlog segment {name} is short"
                                      for name in timerlog.short_segments]
                finally:
                    timerlog.close()

    def _format(self, p: int, slots_total: int) -> None:
        path = self.root / "config" / "format.json"
        if not path.exists():
            return
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            self.problems.append(f"wheel format file {path} is unreadable")
            return
        for name, value in (("precision_ms", p), ("slots_total", slots_total)):
            if name in stored and stored[name] != value:
                self.problems.append(f"wheel at {self.root} was created with "
                                     f"{name}={stored[name]!r}; this configuration has {value!r}")

    def check(self) -> dict[str, Any]:
        return {"engine": self.name, "pending": None, "timerlog_units": self.units,
                "read_only": True, "problems": list(self.problems)}

    def reconcile_from(self) -> int | None:
        return None

    def set_aside(self) -> list:
        return []

    def close(self) -> None:
        pass
