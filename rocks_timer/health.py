"""``Health``: what the broker's background work keeps failing at, for ``stats()``, the logs,
the backoff of the failing loop and the exit status of ``rtimer run``.

A *failure kind* is where it happened (``timer step``, ``deliver put``, ``periodic flush``)
and the exception's type. Each kind failing now has one record: how many times in a row, since
when, the last error. A success at that place ends every streak there (one line says it
recovered). Logging stays readable however fast a loop fails: the first failure of a streak is
logged with its traceback, the next ones are counted and summed up in one line per kind per
``failure_log_interval_ms`` (a damaged store logged a traceback ten times a second before).
The backoff a failing loop waits doubles with each failure in a row, up to
``service_retry_max_backoff_ms``.
"""
from __future__ import annotations

import datetime as dt
import logging
import threading
from dataclasses import dataclass
from typing import Any

from rocks_timer.clock import Clock

log = logging.getLogger("rocks_timer.health")

TIMER_STEP = "timer step"
DELIVER_PUT = "deliver put"
PERIODIC_FLUSH = "periodic flush"
LEVEL_SCAN_PREFIX = "delay level "


def level_scan(level: int) -> str:
    """Where a delay level's scanner fails (one failure kind per level)."""
    return f"{LEVEL_SCAN_PREFIX}{level} scan"


def is_delivery(where: str) -> bool:
    """Failing at ``where`` keeps due messages from reaching their topic."""
    return where in (TIMER_STEP, DELIVER_PUT) or where.startswith(LEVEL_SCAN_PREFIX)
_MAX_ERROR_CHARS = 500


@dataclass
class Failure:
    """One failure kind's current streak."""

    where: str
    error_type: str
    count: int
    since_ms: int
    last_ms: int
    last_error: str
    logged_ms: int
    unlogged: int = 0  # failures since the last line about this kind
    quiet: bool = False  # a query's failure its caller reports: never logged, nor its end

    @property
    def kind(self) -> str:
        return f"{self.where}: {self.error_type}"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "where": self.where, "error_type": self.error_type,
                "count": self.count, "since_ms": self.since_ms, "last_ms": self.last_ms,
                "last_error": self.last_error, "delivery": is_delivery(self.where)}


class Health:
    """The failure streaks of one broker's services (thread-safe: the timer loop, the flush
    loop and ``stats()`` callers share it)."""

    def __init__(self, clock: Clock, log_interval_ms: int, max_backoff_ms: int):
        self.clock = clock
        self.log_interval_ms = log_interval_ms
        self.max_backoff_ms = max_backoff_ms
        self._failures: dict[tuple[str, str], Failure] = {}
        self._lock = threading.Lock()

    def failed(self, where: str, exc: BaseException, first_backoff_ms: int = 100,
               quiet: bool = False) -> int:
        """Count a failure at ``where``; log it as described above (``quiet``: never, for a
        query whose caller reports the error itself). Returns how long the failing loop
        should wait before trying again: ``first_backoff_ms`` doubled per failure in a row,
        at most ``max_backoff_ms``."""
        now = self.clock.now_ms()
        key = (where, type(exc).__name__)
        text = str(exc)[:_MAX_ERROR_CHARS]
        with self._lock:
            failure = self._failures.get(key)
            if failure is None:
                failure = self._failures[key] = Failure(where, key[1], 1, now, now, text, now,
                                                        quiet=quiet)
                first = True
            else:
                failure.count += 1
                failure.last_ms, failure.last_error = now, text
                failure.unlogged += 1
                first = False
            due_line = not first and now - failure.logged_ms >= self.log_interval_ms
            if due_line:
                failure.logged_ms, unlogged = now, failure.unlogged
                failure.unlogged = 0
            backoff = min(self.max_backoff_ms,
                          first_backoff_ms << min(failure.count - 1, 30))
        if quiet:
            return backoff
        if first:
            log.error("%s failed: %s: %s (logged once; while it keeps failing, one line per "
                      "%d s)", where, key[1], text, self.log_interval_ms // 1000, exc_info=exc)
        elif due_line:
            log.error("%s still failing: %s: %s (%d more time(s) since the last line, %d in a "
                      "row since %s); next try in %d ms", where, key[1], text, unlogged,
                      failure.count, _utc(failure.since_ms), backoff)
        return backoff

    def recovered(self, where: str) -> None:
        """``where`` worked: every streak there ends (one line each)."""
        if not self._failures:  # the common case, without the lock
            return
        with self._lock:
            ended = [self._failures.pop(key) for key in list(self._failures) if key[0] == where]
        for failure in ended:
            if failure.quiet:
                continue
            log.warning("%s works again after %d failure(s) (%s) since %s", where,
                        failure.count, failure.error_type, _utc(failure.since_ms))

    @property
    def healthy(self) -> bool:
        return not self._failures

    def failing(self, delivery_only: bool = False) -> list[dict[str, Any]]:
        """The streaks going on now (``delivery_only``: those that keep due messages from
        being delivered), oldest first."""
        with self._lock:
            records = sorted(self._failures.values(), key=lambda f: (f.since_ms, f.kind))
            return [f.as_dict() for f in records
                    if not delivery_only or is_delivery(f.where)]

    def as_dict(self) -> dict[str, Any]:
        """``stats()["health"]``: ``status`` healthy or degraded, and the failures."""
        failures = self.failing()
        return {"status": "degraded" if failures else "healthy", "failures": failures}


def _utc(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
