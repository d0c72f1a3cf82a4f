"""Engines declare what they can do (``rocks_timer.timer.store``): each subclasses ``TimerStore``,
inherits the defaults of the optional capabilities it lacks, and claims the small protocols it
has (``Compacting``, ``ColumnClaim``); callers use them instead of probing with ``getattr``."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.engine_helpers import ENGINES, START_MS
from rocks_timer import Message
from rocks_timer.errors import InvalidMessageError
from rocks_timer.message import new_msg_id
from rocks_timer.timer.memory import MemoryTimerStore
from rocks_timer.timer.rocksdb import RocksTimerStore
from rocks_timer.timer.store import (ColumnClaim, Compacting, TimerRecord, TimerStore,
                                     is_column_claim, join_records)
from rocks_timer.timer.wheel import WheelTimerStore

ROOT = Path(__file__).resolve().parents[2]
# engine name -> (class, claims Compacting, its claims are ColumnClaims)
DECLARED = {"memory": (MemoryTimerStore, False, False),
            "rocksdb": (RocksTimerStore, True, True),
            "rocksdb-inline": (RocksTimerStore, True, True),
            "wheel": (WheelTimerStore, False, False)}


def _send_due(broker, clock, topics: list[str]) -> None:
    for i, topic in enumerate(topics):
        broker.send(Message(topic=topic, body=b"x%d" % i), deliver_at_ms=START_MS + 1_000 + i)
    broker.tick()  # the wheel enqueues what it was sent


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_declares_the_protocol_and_only_the_extras_it_has(make_broker, engine):
    cls, compacting, _ = DECLARED[engine]
    broker = make_broker(engine)
    timer = broker.timer
    assert type(timer) is cls
    assert TimerStore in cls.__mro__  # declared, not merely shaped alike
    assert isinstance(timer, TimerStore)
    assert isinstance(timer, Compacting) is compacting
    assert isinstance(timer.forgets_on_complete, bool) and isinstance(timer.due_basis, str)


@pytest.mark.parametrize("engine", ENGINES)
def test_optional_capabilities_answer_on_every_engine(make_broker, clock, engine):
    broker = make_broker(engine)
    _send_due(broker, clock, ["a", "b", "a"])
    timer = broker.timer
    timer.sync()  # every engine has one (a no-op in memory)
    report = timer.check()
    assert report["problems"] == []
    assert report["pending"] == 3
    assert timer.count_by_topic(100) == ({"a": 2, "b": 1}, True)
    counts, complete = timer.count_by_topic(2)
    if engine.startswith("rocksdb"):  # exact per-topic counters: complete whatever the bound
        assert (counts, complete) == ({"a": 2, "b": 1}, True)
    else:  # the default walk stops at the bound and says so
        assert not complete and sum(counts.values()) == 2
    assert timer.set_aside() == []
    assert timer.restore_set_aside(None, clock.now_ms()) == {"restored": [], "refused": []}
    offset = timer.enqueue_offset()
    if engine == "wheel":  # it read its three sends from the timer topic
        assert offset == 3
    else:
        assert offset is None


def test_the_default_restore_refuses_named_messages(make_broker):
    broker = make_broker("memory")
    with pytest.raises(InvalidMessageError, match="sets nothing aside"):
        broker.restore_set_aside(["0" * 32])


@pytest.mark.parametrize("engine", ENGINES)
def test_claims_are_column_claims_only_where_declared(make_broker, clock, engine):
    _, _, columns = DECLARED[engine]
    broker = make_broker(engine)
    _send_due(broker, clock, ["a", "b"])
    clock.advance(5_000)
    broker.timer.maintain(clock.now_ms())
    claim = broker.timer.claim_due(clock.now_ms(), 1, 1 << 20)
    rest = broker.timer.claim_due(clock.now_ms(), 10, 1 << 20)
    assert len(claim) == 1 and len(rest) == 1
    assert isinstance(claim, ColumnClaim) is columns
    assert is_column_claim(claim) is columns and is_column_claim(rest) is columns  # remembered
    joined = join_records([claim, rest])
    assert [r.key.msg_id for r in joined] == [claim[0].key.msg_id, rest[0].key.msg_id]
    if columns:  # the copies and keys the deliverer and the tally take, in record order
        assert type(joined) is type(claim) and len(joined.tokens) == len(joined.copies) == 2
    broker.timer.complete(joined, None)


def test_an_engine_missing_a_required_method_cannot_be_built():
    class Incomplete(MemoryTimerStore):
        pass

    Incomplete.__abstractmethods__ = frozenset({"claim_due"})  # as if it never defined it
    with pytest.raises(TypeError, match="claim_due"):
        Incomplete()

    class NoClaim(TimerStore):
        name, exactly_once = "x", True

    with pytest.raises(TypeError, match="abstract"):
        NoClaim()


@pytest.mark.parametrize("engine", ["memory", "rocksdb", "wheel"])
def test_broker_compact_goes_by_the_declared_capability(make_broker, clock, engine):
    broker = make_broker(engine)
    _send_due(broker, clock, ["a"])
    result = broker.compact()
    assert result["engine"] == broker.timer.name
    assert result["compacted"] is (engine == "rocksdb")
    if engine == "rocksdb":  # the default layout has value segments: they are relocated too
        assert result["profile"] == broker.config.rocksdb_profile
        assert result["layout"] == "vlog" and "segments" in result["vlog"]


CAPABILITIES = {"sync", "set_aside", "restore_set_aside", "count_by_topic", "check", "state",
                "queue_offset", "forgets_on_complete", "copies", "tokens", "due_basis",
                "profile", "compact", "relocate", "layout", "join"}


def test_no_caller_probes_an_engine_for_a_capability():
    """The probes this replaced (``getattr(timer, "sync", None)``, ``layout == "vlog"`` in the
    CLI, ...) are not back in the library or the CLI (engines may read their own layout)."""
    found = []
    for path in sorted([*ROOT.glob("rocks_timer/**/*.py"), *ROOT.glob("cli/*.py"),
                        *ROOT.glob("legacy_levels/*.py")]):
        if "rocks_timer/timer/rocksdb" in path.as_posix():
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in CAPABILITIES):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_a_store_built_with_records_keeps_them_through_the_defaults():
    store = MemoryTimerStore()
    store.schedule([TimerRecord(START_MS + 10, Message(topic="t", body=b"1", msg_id=new_msg_id())),
                    TimerRecord(START_MS + 20, Message(topic="u", body=b"2", msg_id=new_msg_id()))], START_MS)
    assert store.count_by_topic(10) == ({"t": 1, "u": 1}, True)
    assert store.check() == {"engine": "memory", "pending": 2, "problems": []}
