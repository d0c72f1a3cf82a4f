"""The legacy delay-level table (``messageDelayLevel``), parsed the way RocketMQ parses it.

``"1s 5s 10s"`` becomes levels 1..3 with delays in ms. Units are ``s m h d`` (case-sensitive);
elements are separated by single spaces. Unlike RocketMQ, a malformed table is rejected whole
(``ConfigError`` naming the element) instead of leaving a half-parsed table behind.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from rocks_timer.errors import ConfigError

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_ELEMENT = re.compile(r"^(-?\d+)([smhd])$")


@dataclass(frozen=True)
class DelayLevelTable:
    """Level ``i`` (1-based) waits ``delays_ms[i-1]`` ms; queue id = level - 1."""

    delays_ms: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> "DelayLevelTable":
        if not isinstance(text, str) or text == "":
            raise ConfigError("message_delay_level is empty; expected e.g. '1s 5s 10s'")
        delays = []
        for index, element in enumerate(text.split(" "), start=1):
            match = _ELEMENT.match(element)
            if match is None:
                raise ConfigError(
                    f"message_delay_level element {index} is {element!r}; expected an integer "
                    "followed by one of s, m, h, d (single spaces between elements)"
                )
            delays.append(int(match.group(1)) * UNIT_MS[match.group(2)])
        return cls(tuple(delays))

    @property
    def max_level(self) -> int:
        return len(self.delays_ms)

    def clamp(self, level: int) -> int:
        """A level above the table's maximum is clamped to the maximum (RocketMQ behaviour)."""
        return min(level, self.max_level)

    def delay_ms(self, level: int) -> int:
        """Delay of ``level``; an unknown level waits 1000 ms, as RocketMQ's computeDeliverTimestamp."""
        if 1 <= level <= self.max_level:
            return self.delays_ms[level - 1]
        return 1_000

    def deliver_at_ms(self, level: int, store_ms: int) -> int:
        return store_ms + self.delay_ms(level)

    @staticmethod
    def queue_id(level: int) -> int:
        return level - 1

    @staticmethod
    def level_of(queue_id: int) -> int:
        return queue_id + 1

    def levels(self) -> range:
        return range(1, self.max_level + 1)
