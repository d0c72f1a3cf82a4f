"""One timer engine's ``TimerStore`` opened on its own (no Broker), for the store-level contract.

The harness does by hand what the deliverer does: it puts each claimed record's message into a
real CommitLog and then completes the records with the CommitLog's end. The wheel needs that
CommitLog (its records live there); the other engines ignore it. Time is a ``ManualClock``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from rocks_timer.clock import ManualClock
from rocks_timer.config import BrokerConfig
from rocks_timer.message import WHEEL_TIMER_TOPIC, Message, new_msg_id
from rocks_timer.message_store import MessageStore
from rocks_timer.timer.delivery import delivery_copy_py
from rocks_timer.timer.memory import MemoryTimerStore
from rocks_timer.timer.rocksdb import RocksTimerStore
from rocks_timer.timer.store import DueRecord, TimerRecord, TimerStore
from rocks_timer.timer.wheel import WheelTimerStore
from tests.support.engine_helpers import START_MS, engine_settings


@dataclass(frozen=True)
class EngineTraits:
    """What the protocol lets an engine choose, so the suite asks each for what it promises."""

    durable: bool  # survives close and reopen
    exact_cancel: bool  # a pending message that is not in flight is always cancelled (True)
    reconciles: bool  # exactly once across a crash: reconcile() drops keys found delivered
    keyed: bool  # find / cancel_by_key / reschedule are supported, and the counts are exact
    late_ms: int  # how long after its due time a record may still wait (the wheel's slot)


TRAITS = {
    "memory": EngineTraits(durable=False, exact_cancel=True, reconciles=False, keyed=True,
                           late_ms=0),
    "rocksdb": EngineTraits(durable=True, exact_cancel=True, reconciles=True, keyed=True,
                            late_ms=0),
    "rocksdb-inline": EngineTraits(durable=True, exact_cancel=True, reconciles=True, keyed=True,
                                   late_ms=0),
    # the wheel reads slot T once floor(now) > T: up to two precisions after the due time
    "wheel": EngineTraits(durable=True, exact_cancel=False, reconciles=False, keyed=False,
                          late_ms=200),
}
ENGINES = list(TRAITS)
DURABLE = [e for e, t in TRAITS.items() if t.durable]
RECONCILING = [e for e, t in TRAITS.items() if t.reconciles]
BUDGET_BYTES = 64 << 20


def config_of(engine: str) -> BrokerConfig:
    return BrokerConfig(**engine_settings(engine), commitlog_segment_size=1 << 20, max_message_size=64 * 1024,
                        consume_queue_entries_per_file=64).validate()


def open_timer_store(engine: str, root: Path, messages: MessageStore, clock: ManualClock
                     ) -> TimerStore:
    config = config_of(engine)
    if engine == "memory":
        return MemoryTimerStore()
    if engine.startswith("rocksdb"):
        return RocksTimerStore.open(root / "timer-rocksdb", config)
    return WheelTimerStore.open(root / "wheel", messages, config, clock=clock)


class StoreHarness:
    """``store`` (one engine's TimerStore) over ``messages`` (a real MessageStore) at ``root``."""

    def __init__(self, engine: str, root: Path, start_ms: int = START_MS):
        self.engine = engine
        self.traits = TRAITS[engine]
        self.root = Path(root)
        self.clock = ManualClock(start_ms)
        self.store: TimerStore | None = None
        self.messages: MessageStore | None = None
        self.open()

    def open(self) -> None:
        self.messages = MessageStore.open(self.root / "store", config_of(self.engine), self.clock)
        self.store = open_timer_store(self.engine, self.root, self.messages, self.clock)

    def close(self) -> None:
        self.store.close()
        self.messages.close()

    def reopen(self) -> None:
        self.close()
        self.open()

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def schedule(self, due_ms: int, topic: str = "orders", body: bytes = b"x",
                 keys: Sequence[str] = ()) -> tuple[str, str]:
        """Park one message due at ``due_ms``; returns (msg_id, handle)."""
        msg = Message(topic, body, keys=tuple(keys), msg_id=new_msg_id())
        [scheduled] = self.store.schedule([TimerRecord(due_ms, msg)], self.now)
        return msg.msg_id, scheduled.handle

    def claim(self, max_messages: int = 10_000) -> list[DueRecord]:
        return list(self.store.claim_due(self.now, max_messages, BUDGET_BYTES))

    def put(self, records: Sequence[DueRecord]) -> int:
        """Put the delivered copies of ``records`` into the CommitLog as the deliverer builds
        them (the claim's prepared copy, else one made from the message); returns its end."""
        copies = [r.copy if r.copy is not None else
                  delivery_copy_py(r.message, r.key.due_ms, self.now) for r in records]
        if copies:
            self.messages.wait(self.messages.put_messages_async(copies))
        return self.messages.max_offset

    def deliver(self, records: Sequence[DueRecord]) -> int:
        """The deliverer's part: put the copies, then complete the records with the CommitLog's
        end. Returns that end."""
        end = self.put(records)
        self.store.complete(records, end)
        return end

    def problems(self) -> list[str]:
        """The engine's own invariant walk (the memory reference has none to walk)."""
        if self.engine == "memory":
            return []
        return list(self.store.check()["problems"])


def users(records: Sequence[DueRecord]) -> list[DueRecord]:
    """The records that are user messages (the wheel also hands out its own roll records)."""
    return [r for r in records if r.message.topic != WHEEL_TIMER_TOPIC]


def ids(records: Sequence[DueRecord]) -> list[str]:
    return [r.key.msg_id for r in users(records)]
