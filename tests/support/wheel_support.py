"""The wheel engine test environment: a real MessageStore and wheel under a manual clock."""
from __future__ import annotations

from pathlib import Path

import pytest

from rocks_timer.clock import ManualClock
from rocks_timer.config import BrokerConfig
from rocks_timer.message import WHEEL_TIMER_TOPIC, Message
from rocks_timer.message_store import MessageStore
from rocks_timer.timer.handles import decode_handle
from rocks_timer.timer.store import TimerRecord
from rocks_timer.timer.wheel import WheelTimerStore

START_MS = 1_700_000_000_000  # a multiple of 1000
DAY_MS = 86_400_000


class Env:
    """A message store + wheel under a manual clock, with the deliverer's loop inline."""

    def __init__(self, root: Path, config: BrokerConfig, start_ms: int = START_MS, **wheel_kw):
        self.root = root
        self.config = config
        self.clock = ManualClock(start_ms)
        self.wheel_kw = wheel_kw
        self.delivered: list[tuple[int, Message]] = []
        self.open()

    def open(self) -> None:
        self.store = MessageStore.open(self.root / "store", self.config, self.clock)
        self.wheel = WheelTimerStore.open(self.root / "wheel", self.store, self.config,
                                          clock=self.clock, **self.wheel_kw)

    def close(self) -> None:
        self.wheel.close()
        self.store.close()

    def reopen(self) -> None:
        self.close()
        self.open()

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def send(self, topic: str, due_ms: int, body: bytes = b"x", **props) -> tuple[str, str]:
        msg = Message(topic=topic, body=body, properties=props)
        scheduled = self.wheel.schedule([TimerRecord(due_ms, msg)], self.now)[0]
        return decode_handle(scheduled.handle).msg_id, scheduled.handle

    def step(self, max_messages: int = 10_000) -> list:
        now = self.now
        self.wheel.maintain(now)
        records = self.wheel.claim_due(now, max_messages, 64 << 20)
        for record in records:
            self.store.put_message(record.message)
            if record.message.topic != WHEEL_TIMER_TOPIC:
                self.delivered.append((now, record.message))
        self.wheel.complete(records, None)
        return records

    def run(self, until_ms: int, step_ms: int, retention: bool = False) -> None:
        while self.now < until_ms:
            self.clock.set(min(until_ms, self.now + step_ms))
            self.step()
            if retention:
                self.store.delete_expired(self.now)

    def delivered_ids(self, topic: str | None = None) -> list[str]:
        return [m.msg_id for _, m in self.delivered if topic is None or m.topic == topic]


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path, BrokerConfig(timer_engine="wheel"))
    yield e
    e.close()


def make_env(tmp_path, **config) -> Env:
    return Env(tmp_path, BrokerConfig(timer_engine="wheel", **config))
