"""Child process of test_wheel_crash: schedules and delivers until killed.

Prints one line ``ACK <msg_id> <due_ms>`` per message whose ``schedule`` returned, flushed at
once, so the parent knows exactly which sends were acknowledged before the ``kill -9``.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

from rocks_timer.clock import SystemClock
from rocks_timer.config import BrokerConfig
from rocks_timer.message import WHEEL_TIMER_TOPIC, Message
from rocks_timer.message_store import MessageStore
from rocks_timer.timer.handles import decode_handle
from rocks_timer.timer.store import TimerRecord
from rocks_timer.timer.wheel import WheelTimerStore

CONFIG = BrokerConfig(timer_engine="wheel", timer_precision_ms=100, timer_flush_interval_ms=50)


def main(root: Path, seed: int) -> None:
    rng = random.Random(seed)
    clock = SystemClock()
    store = MessageStore.open(root / "store", CONFIG, clock)
    wheel = WheelTimerStore.open(root / "wheel", store, CONFIG, clock=clock,
                                 timerlog_segment_size=64 * 1024)
    print("READY", flush=True)
    while True:
        now = clock.now_ms()
        records = []
        for _ in range(rng.randint(1, 20)):
            due = now + rng.randint(150, 2500)
            records.append(TimerRecord(due, Message(topic="T", body=str(due).encode())))
        for record, scheduled in zip(records, wheel.schedule(records, now)):
            print(f"ACK {decode_handle(scheduled.handle).msg_id} {record.due_ms}", flush=True)
        now = clock.now_ms()
        wheel.maintain(now)
        due_records = wheel.claim_due(now, 50, 1 << 20)
        for record in due_records:
            store.put_message(record.message)
        wheel.complete(due_records, None)
        assert all(r.message.topic in ("T", WHEEL_TIMER_TOPIC) for r in due_records)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
