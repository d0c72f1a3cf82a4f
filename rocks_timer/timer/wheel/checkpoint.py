"""Small crash-safe files of the wheel: the checkpoint, the per-topic metrics, the format record.

Every write goes to a temp file in the same directory, is fsynced and then renamed over the old
file, so a crash leaves either the old or the new content.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rocks_timer.errors import ConfigError, CorruptRecordError
from rocks_timer.fileio import mkdir_durably, replace_durably
from rocks_timer.timer.wheel.layouts import Checkpoint


def write_atomically(path: Path, data: bytes) -> int:
    """Replace ``path`` with ``data`` (temp file, fsync, rename, fsync dir); returns len(data)."""
    mkdir_durably(path.parent)
    replace_durably(path, data)
    return len(data)


class TimerCheckpointFile:
    """Owns ``config/timercheck``: the last committed read time, flush position and offsets."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.bytes_written = 0
        self.existed = self.path.exists()

    def load(self) -> Checkpoint:
        if not self.path.exists():
            return Checkpoint()
        data = self.path.read_bytes()
        try:
            return Checkpoint.decode(data)
        except ValueError as exc:
            raise CorruptRecordError(
                f"checkpoint {self.path} is damaged ({exc}); move it away and open again: the "
                "wheel then rebuilds its position from the TimerLog and the timer topic "
                "(messages delivered just before may be delivered again)",
                where=str(self.path), raw=data) from None

    def save(self, checkpoint: Checkpoint) -> None:
        self.bytes_written += write_atomically(self.path, checkpoint.encode())


class TimerMetricsFile:
    """Owns ``config/timermetrics``: pending count per real topic, JSON as RocketMQ writes it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.bytes_written = 0

    def load(self, version: int | None = None) -> dict[str, int]:
        """The counts saved with checkpoint ``version`` (the file or its ``.bak``); without a
        match (an older data dir, or None), the newest readable ones."""
        found = []
        for candidate in (self.path, self.path.with_name(self.path.name + ".bak")):
            if not candidate.exists():
                continue
            try:
                data = json.loads(candidate.read_text(encoding="utf-8"))
                counts = {topic: int(v["count"]) for topic, v in data["timingCount"].items()}
                found.append((data.get("dataVersion", {}).get("counter"), counts))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
        for saved, counts in found:
            if version is not None and saved == version:
                return counts
        return found[0][1] if found else {}

    def save(self, counts: dict[str, int], now_ms: int, version: int) -> None:
        body = {"dataVersion": {"counter": version, "timestamp": now_ms},
                "timingCount": {t: {"count": c, "timeStamp": now_ms}
                                for t, c in sorted(counts.items())}}
        if self.path.exists():
            os.replace(self.path, self.path.with_name(self.path.name + ".bak"))
        data = json.dumps(body, ensure_ascii=True).encode("ascii")
        self.bytes_written += write_atomically(self.path, data)


def check_format(path: Path, settings: dict[str, Any]) -> None:
    """Record the format-defining settings on first open; refuse a mismatch later."""
    if path.exists():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            raise ConfigError(f"wheel format file {path} is unreadable") from None
        for name, value in settings.items():
            if name in stored and stored[name] != value:
                raise ConfigError(f"wheel at {path.parent.parent} was created with "
                                  f"{name}={stored[name]!r}; this configuration has {value!r}")
        return
    write_atomically(path, json.dumps(settings, sort_keys=True).encode("ascii"))
