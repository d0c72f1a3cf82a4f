"""Child process for the legacy-levels kill -9 test.

Usage: python levels_crash_child.py ROOT MODE COUNT   (MODE: sync | async)

Opens a MessageStore and a ScheduleMessageService (levels "1s 2s", SystemClock, offsets persisted
every 200 ms) on ROOT, starts the scanner threads, then parks COUNT level messages on topic
``crash``, printing ``ACK <msg_id>`` after each put returns. Then it keeps running until killed.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from legacy_levels.service import ScheduleMessageService  # noqa: E402
from rocks_timer.clock import SystemClock  # noqa: E402
from rocks_timer.config import BrokerConfig  # noqa: E402
from rocks_timer.message import DELAY, REAL_QID, REAL_TOPIC, SCHEDULE_TOPIC, Message  # noqa: E402
from rocks_timer.message_store import MessageStore  # noqa: E402


def main() -> None:
    root, mode, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    config = BrokerConfig(message_delay_level="1s 2s", flush_delay_offset_interval_ms=200,
                          enable_schedule_async_deliver=mode == "async").validate()
    clock = SystemClock()
    store = MessageStore.open(root, config, clock)
    service = ScheduleMessageService(root, store, config, clock)
    service.start()
    print("STARTED", flush=True)
    for i in range(count):
        level = 1 + i % 2
        msg = Message(topic=SCHEDULE_TOPIC, body=f"m{i}".encode(), queue_id=level - 1,
                      properties={REAL_TOPIC: "crash", REAL_QID: "0", DELAY: str(level)})
        result = store.put_message(msg)
        sys.stdout.write(f"ACK {result.msg_id}\n")
        sys.stdout.flush()
        time.sleep(0.001)
    print("DONE", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
