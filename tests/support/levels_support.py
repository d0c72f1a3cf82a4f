"""Shared helpers for the legacy delay-level tests: park messages, a CommitLog that fails puts."""
from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

from rocks_timer.clock import ManualClock
from rocks_timer.config import BrokerConfig
from rocks_timer.errors import PutFailedError
from rocks_timer.message import DELAY, REAL_QID, REAL_TOPIC, SCHEDULE_TOPIC, Message
from rocks_timer.message_store import MessageStore

T0_MS = 1_700_000_000_000


def park(store, level: int, topic: str = "orders", body: bytes = b"x", *, queue_id: int = 0,
         tags: str | None = None, keys=(), props: dict | None = None, flag: int = 0,
         born_ms: int | None = None, reconsume_times: int = 0):
    """Store a level message the way the broker's send path does (topic SCHEDULE_TOPIC_XXXX)."""
    properties = {REAL_TOPIC: topic, REAL_QID: str(queue_id), DELAY: str(level)}
    properties.update(props or {})
    msg = Message(topic=SCHEDULE_TOPIC, body=body, tags=tags, keys=keys, flag=flag,
                  properties=properties, queue_id=level - 1, born_ms=born_ms,
                  reconsume_times=reconsume_times)
    return store.put_message(msg)


def pull_all(store, topic: str, queue_id: int = 0) -> list[Message]:
    out: list[Message] = []
    while True:
        page = store.pull(topic, queue_id, len(out), 256)
        if not page:
            return out
        out.extend(page)


def open_store(root: Path, clock: ManualClock, **config) -> tuple[MessageStore, BrokerConfig]:
    cfg = BrokerConfig(**config).validate()
    return MessageStore.open(root, cfg, clock), cfg


class FailingStore:
    """Wraps a real MessageStore; the first ``fail_puts`` puts fail, then it recovers.

    ``mode`` picks how an async put fails: ``"future"`` (a failed future) or ``"raise"``
    (put_message_async raises on the spot). Everything else goes to the real store.
    """

    def __init__(self, store: MessageStore, fail_puts: int, mode: str = "future"):
        self._store = store
        self.fail_puts = fail_puts
        self.mode = mode
        self.attempts = 0
        self.failed = 0
        self._lock = threading.Lock()

    def _should_fail(self) -> bool:
        with self._lock:
            self.attempts += 1
            if self.failed < self.fail_puts:
                self.failed += 1
                return True
            return False

    def put_message(self, msg, timeout=None):
        if self._should_fail():
            raise PutFailedError("injected: commitlog put failed")
        return self._store.put_message(msg)

    def put_message_async(self, msg) -> Future:
        if self._should_fail():
            if self.mode == "raise":
                raise PutFailedError("injected: commitlog refused the put")
            failed: Future = Future()
            failed.set_exception(PutFailedError("injected: commitlog put failed"))
            return failed
        return self._store.put_message_async(msg)

    def __getattr__(self, name):
        return getattr(self._store, name)
