"""Power loss, simulated (DESIGN §5 durability): a seeded workload runs under a manual clock; at
several moments the data dir is copied as a power cut would leave it (tests/power_cut.py: every
file cut back to what had been fsynced), and each copy is reopened and driven until everything
is due. Then:

- nothing acknowledged and flushed is lost: in ``sync`` mode every acknowledged send, in
  ``async`` mode every send acknowledged before the last periodic flush, is delivered (or was
  cancelled by a cancel that returned True before that point);
- nothing is delivered early, and a flushed cancel stays cancelled;
- the RocksDB engine delivers no timer message twice (the wheel and the levels are
  at-least-once, as in RocketMQ);
- the engines never forgot a message whose delivered copy was not on disk: that is what would
  turn into a loss here, since a cut copy lacks every unsynced delivered copy.
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

import pytest

from rocks_timer import Broker, BrokerConfig, ManualClock, Message

from engine_helpers import START_MS, drive, engine_settings, pulled
from power_cut import SyncLedger, power_cut_copy, spy_on_rocksdb

TOPICS = ("orders", "billing")
CUTS = 5
ROUNDS = 60  # ticks of 100 ms of the workload


@dataclass
class Cut:
    """One simulated power cut: where its copy is and what had to survive it."""

    path: object
    now_ms: int
    must_deliver: dict = field(default_factory=dict)   # msg_id -> (topic, due_ms)
    cancelled: set = field(default_factory=set)
    timer_ids: set = field(default_factory=set)


@dataclass
class Ledger:
    """What the workload was told so far, and what had been flushed."""

    sent: list = field(default_factory=list)        # (msg_id, topic, due_ms), acknowledged order
    timer_ids: set = field(default_factory=set)      # sends that went to the timer engine
    cancelled: list = field(default_factory=list)   # msg_ids whose cancel returned True
    flushed_sent: int = 0                            # prefix of ``sent`` covered by a flush
    flushed_cancelled: int = 0


def _watch_flushes(broker: Broker, ledger: Ledger) -> None:
    """Count what was acknowledged when each periodic flush began (it covers exactly that)."""
    flush = broker.flush

    def counted() -> None:
        sent, cancelled = len(ledger.sent), len(ledger.cancelled)
        flush()
        ledger.flushed_sent, ledger.flushed_cancelled = sent, cancelled

    broker.flush = counted


def _workload_round(broker: Broker, rng: random.Random, ledger: Ledger, handles: dict) -> None:
    now = broker.clock.now_ms()
    for _ in range(rng.randint(1, 6)):
        topic = rng.choice(TOPICS)
        body = rng.randbytes(rng.choice((20, 300, 2_000)))
        kind = rng.random()
        if kind < 0.6:
            result = broker.send(Message(topic=topic, body=body), delay_ms=rng.randint(50, 3_000))
            handles[result.msg_id] = result.handle
            ledger.timer_ids.add(result.msg_id)
        elif kind < 0.8:
            result = broker.send(Message(topic=topic, body=body), delay_level=1)  # 1 s
        else:
            result = broker.send(Message(topic=topic, body=body))
        ledger.sent.append((result.msg_id, topic, result.deliver_at_ms))
    if handles and rng.random() < 0.3:
        msg_id = rng.choice(sorted(handles))
        if broker.cancel(handles.pop(msg_id)):
            ledger.cancelled.append(msg_id)
    assert broker.clock.now_ms() == now


def _delivered(broker: Broker) -> list:
    return [m for topic in TOPICS for m in pulled(broker, topic)]


# "async-wal-sync": RocksDB writes synced (rocksdb_sync) but the CommitLog flushed every
# interval, so every delete a delivery makes is on disk at once while its delivered copy would
# not be: the case that shows the deliverer's CommitLog sync before it completes is needed.
CASES = [(engine, mode) for engine in ("rocksdb", "rocksdb-inline")
         for mode in ("sync", "async", "async-wal-sync")] + [("wheel", "sync"), ("wheel", "async")]


@pytest.mark.parametrize("engine,mode", CASES)
def test_power_cut_loses_nothing_acknowledged_and_flushed(tmp_path, monkeypatch, engine, mode):
    settings = {**engine_settings(engine), "flush_disk_type": mode.split("-")[0],
                "rocksdb_sync": mode == "async-wal-sync", "flush_interval_ms": 500,
                "commitlog_segment_size": 1 << 20, "max_message_size": 64 * 1024,
                # the level offsets and the wheel checkpoint forget delivered messages on their
                # own schedule, out of step with the periodic flush: they must sync first
                "flush_delay_offset_interval_ms": 300, "timer_flush_interval_ms": 300}
    if engine == "wheel":
        settings["timer_precision_ms"] = 1_000  # a 38 MB slot file instead of 387 MB
    config = BrokerConfig(**settings).validate()
    rng = random.Random(f"{engine}-{mode}")
    file_ledger = SyncLedger().install(monkeypatch)
    clock = ManualClock(START_MS)
    ledger, handles, cuts = Ledger(), {}, []
    cut_at = set(rng.sample(range(5, ROUNDS), CUTS))
    with Broker.open(tmp_path / "data", config, clock=clock) as broker:
        spy_on_rocksdb(broker, file_ledger)
        _watch_flushes(broker, ledger)
        broker.flush()  # from here on the ledger has seen every sync
        for round_no in range(ROUNDS):
            _workload_round(broker, rng, ledger, handles)
            clock.advance(100)
            broker.tick()
            if round_no in cut_at:
                cuts.append(_take_cut(broker, ledger, tmp_path / f"cut-{round_no}",
                                      file_ledger, mode))
    assert file_ledger.syncs > 0 and len(cuts) == CUTS
    if engine.startswith("rocksdb"):
        assert file_ledger.wal_syncs > 0
    for cut in cuts:
        _check_cut(cut, config, exactly_once=engine.startswith("rocksdb"))


def _take_cut(broker: Broker, ledger: Ledger, path, file_ledger: SyncLedger, mode: str) -> Cut:
    everything = mode == "sync"
    sent = ledger.sent if everything else ledger.sent[:ledger.flushed_sent]
    cancelled = set(ledger.cancelled if everything
                    else ledger.cancelled[:ledger.flushed_cancelled])
    power_cut_copy(broker.path, path, file_ledger)
    must = {msg_id: (topic, due) for msg_id, topic, due in sent if msg_id not in cancelled}
    return Cut(path, broker.clock.now_ms(), must, cancelled, set(ledger.timer_ids))


def _check_cut(cut: Cut, config: BrokerConfig, exactly_once: bool) -> None:
    clock = ManualClock(cut.now_ms)
    with Broker.open(cut.path, config, clock=clock) as broker:
        drive(broker, clock, cut.now_ms + 5_000, step_ms=500)
        delivered = _delivered(broker)
        pending = broker.stats()["pending"]
    seen = Counter(m.msg_id for m in delivered)
    missing = [msg_id for msg_id in cut.must_deliver if msg_id not in seen]
    assert not missing, f"{cut.path.name}: {len(missing)} flushed sends lost, e.g. {missing[:3]}"
    assert pending == 0
    resurrected = [msg_id for msg_id in cut.cancelled if msg_id in seen]
    assert not resurrected, f"{cut.path.name}: cancelled yet delivered: {resurrected[:3]}"
    for message in delivered:
        due = cut.must_deliver.get(message.msg_id, (None, None))[1]
        assert due is None or message.store_ms >= due, "delivered early"
    if exactly_once:
        twice = [msg_id for msg_id, n in seen.items() if n > 1 and msg_id in cut.timer_ids]
        assert not twice, f"{cut.path.name}: delivered twice: {twice[:3]}"
