"""The ``Broker`` operations by business key, reschedule and the due histogram (a mixin, so
the send and delivery paths in ``broker.py`` stay as they are).

Semantics (docs/DECISIONS.md, "Find, cancel and reschedule by key"):

- ``find(topic, key)`` lists the pending timer messages of ``topic`` whose KEYS hold ``key``,
  as ``scan`` lists them (due order, in-flight ones included until delivered).
- ``cancel_by_key(topic, key)`` cancels every one of them not being delivered; the count (an
  int carrying the cancelled ``handles``) is definite, as ``cancel`` is.
- ``reschedule(handle, deliver_at_ms)`` moves one pending message to a new due time in one
  atomic write and returns its new handle; ``reschedule_by_key`` does it for every message
  ``find`` lists, in one write. A message already being delivered, delivered or cancelled is
  reported (``status``) and left alone. A time in the past is due at once; one beyond
  ``timer_max_delay_sec`` is refused (``DelayOutOfRangeError``), as a send is. Level messages
  have no handle and are not in the key index: they cannot be rescheduled.
- The file wheel answers ``UnsupportedOperationError`` to all four (it keeps no key index and
  its cancel is best-effort); its due histogram comes from its slot counts.
"""
from __future__ import annotations

from typing import Any

from rocks_timer.errors import DelayOutOfRangeError, InvalidMessageError
from rocks_timer.routing import validate_key, validate_topic
from rocks_timer.timer.histogram import DEFAULT_DAYS, due_histogram
from rocks_timer.timer.store import KeyCancel, Rescheduled, ScanPage


class KeyedOperations:
    """Mixed into ``Broker``: uses its ``timer``, ``clock``, ``config`` and wake-up event."""

    rescheduled = 0

    def find(self, topic: str, key: str, limit: int = 100, after: str | None = None
             ) -> ScanPage:
        """Pending timer messages of ``topic`` whose KEYS hold ``key``, in due order."""
        self._check_open()
        if limit < 0:
            raise ValueError(f"limit={limit} must be >= 0")
        return self.timer.find(validate_topic(topic), validate_key(key), limit=limit,
                               after=after)

    def cancel_by_key(self, topic: str, key: str) -> KeyCancel:
        """Cancel every pending message of ``topic`` with ``key``; returns how many (an int
        whose ``handles`` name them). Each counted one will never be delivered."""
        self._check_open()
        cancelled = self.timer.cancel_by_key(validate_topic(topic), validate_key(key),
                                             self.clock.now_ms())
        self.cancelled += int(cancelled)
        return cancelled

    def reschedule(self, handle: str, deliver_at_ms: int) -> Rescheduled:
        """Move the pending message ``handle`` names to ``deliver_at_ms`` (atomic; delivered
        once, at the new time). ``status`` says "rescheduled" (``handle`` is the new one),
        "in_flight" or "not_found" (nothing changed)."""
        self._check_open()
        now_ms = self._check_due(deliver_at_ms)
        [result] = self.timer.reschedule([handle], deliver_at_ms, now_ms)
        self._after_reschedule([result])
        return result

    def reschedule_by_key(self, topic: str, key: str, deliver_at_ms: int) -> list[Rescheduled]:
        """``reschedule`` of every pending message of ``topic`` with ``key``, in one write."""
        self._check_open()
        topic, key = validate_topic(topic), validate_key(key)
        now_ms = self._check_due(deliver_at_ms)
        results = self.timer.reschedule_by_key(topic, key, deliver_at_ms, now_ms)
        self._after_reschedule(results)
        return results

    def due_histogram(self, first_day_ms: int | None = None, days: int = DEFAULT_DAYS
                      ) -> dict[str, Any]:
        """Pending counts per due bucket (now, next minute / hour / day / week, later) and
        per UTC day for ``days`` days from the day of ``first_day_ms`` (default today)."""
        self._check_open()
        return due_histogram(self.timer, self.clock.now_ms(), first_day_ms, days)

    # -- helpers ----------------------------------------------------------------------------
    def _check_due(self, deliver_at_ms: int) -> int:
        if isinstance(deliver_at_ms, bool) or not isinstance(deliver_at_ms, int):
            raise InvalidMessageError(f"deliver_at_ms={deliver_at_ms!r} is not an integer")
        if deliver_at_ms < 0:
            raise InvalidMessageError(f"deliver_at_ms={deliver_at_ms} is before the epoch")
        now_ms = self.clock.now_ms()
        if deliver_at_ms - now_ms > self.config.max_delay_ms:
            raise DelayOutOfRangeError(
                f"due time {deliver_at_ms} is {deliver_at_ms - now_ms} ms ahead; the maximum is "
                f"{self.config.max_delay_ms} ms (timer_max_delay_sec="
                f"{self.config.timer_max_delay_sec}); nothing was rescheduled")
        return now_ms

    def _after_reschedule(self, results: list[Rescheduled]) -> None:
        moved = [r for r in results if r.status == "rescheduled"]
        self.rescheduled += len(moved)
        if moved and min(r.deliver_at_ms for r in moved) < self._wake_at_ms:
            self._wake.set()  # due sooner than the timer loop planned to wake
