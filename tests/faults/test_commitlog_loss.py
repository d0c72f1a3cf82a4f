"""The CommitLog-loss rows of the recovery fault campaign (issue #30 points 2 and 8): a file cut
or deleted is not "a torn tail", nor nothing at all. What remains is delivered and consumable;
what is gone is named (topic, queue, queue offset, CommitLog offset and size), recorded before
recovery drops the queue entries that named it, kept across reopens, and `rtimer check` exits
non-zero until an operator accepts it."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from cli.main import cli
from tests.support.fault_support import (ALL_LATER, N, SEGMENT, delivered_later, kept, reopen, rtimer_check,
                           seed, segment)


def _lost_list(path) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["--data-dir", str(path), "lost", "list", "--json"])
    return result.exit_code, json.loads(result.output)


RECORD = 4143  # bytes of one orders record


ROWS = {
    # name: (damage, the CommitLog range it takes, whether the level message goes with it)
    "middle segment cut in half": (
        lambda p: os.truncate(segment(p, 0), SEGMENT // 2), lambda size2: (SEGMENT // 2, SEGMENT),
        False),
    "middle segment deleted": (
        lambda p: segment(p, 1).unlink(), lambda size2: (SEGMENT, 2 * SEGMENT), False),
    "newest segment cut in half": (
        lambda p: os.truncate(segment(p, 2), segment(p, 2).stat().st_size // 2),
        lambda size2: (2 * SEGMENT + size2 // 2, 3 * SEGMENT), True),
    "newest segment deleted": (
        lambda p: segment(p, 2).unlink(), lambda size2: (2 * SEGMENT, 3 * SEGMENT), True),
}


@pytest.mark.parametrize("row", list(ROWS))
def test_commitlog_loss_is_named_not_silent(tmp_path, row):
    where = seed(tmp_path)
    damage, gone, level_lost = ROWS[row]
    low, high = gone(segment(tmp_path, 2).stat().st_size)
    damage(tmp_path)
    lost = [i for i in range(N) if where["offsets"][i] < high and
            where["offsets"][i] + RECORD > low]
    assert lost
    code, out = rtimer_check(tmp_path)  # read-only: finds it before any open recorded it
    assert code == 1 and "lost message topic orders queue 0" in out, out
    for _ in range(2):  # recorded on the first open, still there on the next
        with reopen(tmp_path) as broker:
            assert kept(broker) == [i for i in range(N) if i not in lost]
            record = broker.lost()
            named = sorted(m.queue_offset for m in record.messages if m.topic == "orders")
            assert named == lost
            assert all(m.size == RECORD for m in record.messages if m.topic == "orders")
            assert any(m.topic == "SCHEDULE_TOPIC_XXXX" for m in record.messages) == level_lost
            assert broker.stats()["lost_unaccepted"] == len(record.messages)
            assert not broker.check().ok
            assert delivered_later(broker) == ALL_LATER  # the timer store is intact
    code, out = rtimer_check(tmp_path)
    assert code == 1 and f"{len(record.messages)} acknowledged message(s) lost" in out
    code, listed = _lost_list(tmp_path)
    assert code == 1 and listed["lost_messages"] == len(record.messages)
    assert CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "lost", "accept"]).exit_code == 0
    code, out = rtimer_check(tmp_path)
    assert code == 0, out
    assert _lost_list(tmp_path)[1]["lost_messages"] == len(record.messages)  # still listed


def test_a_torn_tail_nothing_indexed_is_not_loss(tmp_path):
    seed(tmp_path)
    newest = segment(tmp_path, 2)
    with open(newest, "ab") as f:
        f.write(newest.read_bytes()[:200])
    with reopen(tmp_path) as broker:
        assert broker.lost().total == 0 and broker.stats()["commitlog"]["truncated_bytes"] == 200
        assert broker.check().ok
    assert not (tmp_path / "config" / "commitlogLoss.json").exists()


def test_a_reconcile_checkpoint_beyond_the_end_is_recorded(tmp_path):
    """The timer engine had delivered copies into the part that is gone: recorded before the
    reconciliation moves its checkpoint back to the end."""
    from rocks_timer import Message
    from tests.support.engine_helpers import START_MS
    from tests.support.fault_support import HOUR
    seed(tmp_path)
    with reopen(tmp_path) as broker:
        broker.clock.set(START_MS + 2 * HOUR)
        for _ in range(10):
            broker.tick()
        assert len(broker.pull("later", 0, 0, 100)) == 5
        broker.send(Message("orders", b"after"))
        reconciled = broker.timer.reconcile_from()
    newest = max((tmp_path / "commitlog").iterdir())
    os.truncate(newest, newest.stat().st_size - 4000)
    with reopen(tmp_path) as broker:
        record = broker.lost()
        assert any("reconcile checkpoint" in r.why and r.end == reconciled
                   for r in record.ranges)
        assert {m.topic for m in record.messages} >= {"later"}
    code, out = rtimer_check(tmp_path)
    assert code == 1 and "reconcile checkpoint" in out
