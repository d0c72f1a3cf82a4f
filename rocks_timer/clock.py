"""Injected clocks: every time-dependent part reads ``now_ms()`` from one of these."""
from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...


class SystemClock:
    """Wall-clock time in integer epoch milliseconds."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that only moves when told to; tests and simulated-time benchmarks drive it."""

    def __init__(self, start_ms: int = 0):
        self._now_ms = int(start_ms)
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now_ms

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError(f"ManualClock.advance takes a non-negative number of ms, got {ms}")
        with self._lock:
            self._now_ms += int(ms)
            return self._now_ms

    def set(self, ms: int) -> int:
        """Jump to ``ms``; jumping backwards is allowed (it models a clock step)."""
        with self._lock:
            self._now_ms = int(ms)
            return self._now_ms

    def __repr__(self) -> str:
        return f"ManualClock({self.now_ms()})"
