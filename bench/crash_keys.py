"""The crash soak's operations by business key: sends carry keys, and the child mixes in
reschedules (by handle and by key; later, sooner, into the past) and cancels by key.

Child lines (each printed only after the call returned, so a line is a fact):

    ACK <topic> <msg_id> <handle> <key or ->
    RESCHEDULING <msg_id> <target ms>            before a reschedule by handle
    RESCHEDULED <msg_id> <status> <new handle or ->
    RESCHEDULING_KEY <topic> <key> <target ms>   before a reschedule by key, then one
    RESCHEDULED line per message and RESCHEDULED_KEY_DONE <topic> <key>
    CANCELLING_KEY <topic> <key>                  before a cancel by key
    CANCELLED_KEY <topic> <key> <handle,handle,...|->

The parent judges every delivered copy by its ``TIMER_OUT_MS`` (the key it was delivered
from): it must be the key of the last reschedule that answered "rescheduled" (or of the send),
never an older one ("stale"); a reschedule whose answer was lost to the kill may have happened
or not, so either the old key or one at or after its target is accepted. A copy stored before
its ``TIMER_DELIVER_MS`` is "early". Messages acknowledged with a key before a cancel by key
whose answer was lost are "cancel unknown": delivered at most once.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

KEYS = [f"k{i}" for i in range(30)]


def pick_key(rng: random.Random) -> str | None:
    return rng.choice(KEYS) if rng.random() < 0.7 else None


def _key_due(handle: str) -> int:
    from rocks_timer.timer.handles import decode_handle
    return decode_handle(handle).due_ms


class KeyedChild:
    """What the child remembers to aim its operations: each message's latest handle and key."""

    def __init__(self) -> None:
        self.handle: dict[str, str] = {}
        self.key: dict[str, tuple[str, str]] = {}
        self.ids: list[str] = []

    def acked(self, topic: str, msg_id: str, handle: str | None, key: str | None) -> str:
        if handle is not None:  # a timer message (one due at once was stored at once)
            self.handle[msg_id] = handle
            self.ids.append(msg_id)
            if key:
                self.key[msg_id] = (topic, key)
        return f"ACK {topic} {msg_id} {handle} {key or '-'}"

    def step(self, broker, rng: random.Random, max_delay: int, out) -> None:
        if not self.ids:
            return
        op = rng.random()
        now = broker.clock.now_ms()
        target = now + rng.randint(-300, 2 * max_delay)
        if op < 0.2:
            msg_id = self.ids[rng.randrange(max(0, len(self.ids) - 200), len(self.ids))]
            out(f"RESCHEDULING {msg_id} {target}", flush=True)
            r = broker.reschedule(self.handle[msg_id], target)
            self._note(r, out)
        elif op < 0.26 and self.key:
            topic, key = self.key[rng.choice(list(self.key))]
            out(f"RESCHEDULING_KEY {topic} {key} {target}", flush=True)
            for r in broker.reschedule_by_key(topic, key, target):
                self._note(r, out)
            out(f"RESCHEDULED_KEY_DONE {topic} {key}", flush=True)
        elif op < 0.32 and self.key:
            topic, key = self.key[rng.choice(list(self.key))]
            out(f"CANCELLING_KEY {topic} {key}", flush=True)
            done = broker.cancel_by_key(topic, key)
            out(f"CANCELLED_KEY {topic} {key} {','.join(done.handles) or '-'}", flush=True)

    def _note(self, r, out) -> None:
        if r.status == "rescheduled":
            self.handle[r.msg_id] = r.handle
        out(f"RESCHEDULED {r.msg_id} {r.status} {r.handle or '-'}", flush=False)


@dataclass
class KeyedLedger:
    """The parent's view of keys, reschedules and cancels by key."""

    accept: dict[str, int] = field(default_factory=dict)  # msg_id -> key due it must carry
    loose: dict[str, list[int]] = field(default_factory=dict)  # lost answers: old or >= target
    by_key: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    cancel_unknown: set[str] = field(default_factory=set)
    cancelled_by_key: set[str] = field(default_factory=set)
    rescheduled: int = 0
    key_cancels: int = 0
    _open: dict[str, int] = field(default_factory=dict)  # RESCHEDULING without its answer
    _open_key: dict[tuple[str, str], int] = field(default_factory=dict)
    _cancelling: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def read(self, parts: list[str]) -> bool:
        """Take one line of the child; False if it is not one of these."""
        kind = parts[0]
        if kind == "ACK" and len(parts) == 5:
            if parts[3] == "None":
                return True  # stored at once: no key, nothing to judge
            self.accept[parts[2]] = _key_due(parts[3])
            if parts[4] != "-":
                self.by_key.setdefault((parts[1], parts[4]), []).append(parts[2])
        elif kind == "RESCHEDULING" and len(parts) == 3:
            self._open[parts[1]] = int(parts[2])
        elif kind == "RESCHEDULED" and len(parts) == 4:
            self._open.pop(parts[1], None)
            if parts[2] == "rescheduled":
                self.accept[parts[1]] = _key_due(parts[3])
                self.loose.pop(parts[1], None)  # this answer supersedes any lost one
                self.rescheduled += 1
        elif kind == "RESCHEDULING_KEY" and len(parts) == 4:
            self._open_key[(parts[1], parts[2])] = int(parts[3])
        elif kind == "RESCHEDULED_KEY_DONE" and len(parts) == 3:
            self._open_key.pop((parts[1], parts[2]), None)
        elif kind == "CANCELLING_KEY" and len(parts) == 3:
            self._cancelling[(parts[1], parts[2])] = list(self.by_key.get((parts[1], parts[2]), []))
        elif kind == "CANCELLED_KEY" and len(parts) == 4:
            self._cancelling.pop((parts[1], parts[2]), None)
            self.key_cancels += 1
            if parts[3] != "-":
                from rocks_timer.timer.handles import decode_handle
                self.cancelled_by_key.update(decode_handle(h).msg_id
                                             for h in parts[3].split(","))
        else:
            return False
        return True

    def end_trial(self) -> None:
        """The child was killed: answers it never printed are unknown."""
        for msg_id, target in self._open.items():
            self.loose.setdefault(msg_id, []).append(target)
        for (topic, key), target in self._open_key.items():
            for msg_id in self.by_key.get((topic, key), []):
                self.loose.setdefault(msg_id, []).append(target)
        for ids in self._cancelling.values():
            self.cancel_unknown.update(ids)
        self._open.clear()
        self._open_key.clear()
        self._cancelling.clear()

    def judge(self, copies: list[tuple[str, int, int, int]]) -> dict[str, list[str]]:
        """``copies``: (msg_id, TIMER_OUT_MS, TIMER_DELIVER_MS, store_ms) of every copy."""
        stale, early = [], []
        for msg_id, out_ms, deliver_ms, store_ms in copies:
            want = self.accept.get(msg_id)
            ok = want is None or out_ms == want or any(
                out_ms >= target for target in self.loose.get(msg_id, []))
            if not ok:
                stale.append(msg_id)
            if store_ms < deliver_ms or store_ms < out_ms:
                early.append(msg_id)
        return {"stale": stale, "early": early}
