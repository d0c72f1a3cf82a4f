"""The crash soak's judge of keyed operations: a copy from a superseded key is stale, a lost
answer accepts either outcome, a lost cancel by key makes its messages 'cancel unknown'."""
from bench.crash_keys import KeyedLedger
from rocks_timer.timer.handles import encode_handle

ID1, ID2 = "A" * 32, "B" * 32


def h(due: int, msg_id: str = ID1) -> str:
    return encode_handle("orders", due, msg_id)


def feed(ledger: KeyedLedger, *lines: str) -> None:
    for line in lines:
        assert ledger.read(line.split()), line


def test_copy_from_a_superseded_key_is_stale():
    ledger = KeyedLedger()
    feed(ledger, f"ACK orders {ID1} {h(1000)} k1", f"RESCHEDULING {ID1} 5000",
         f"RESCHEDULED {ID1} rescheduled {h(5000)}")
    assert ledger.judge([(ID1, 1000, 1000, 1200)]) == {"stale": [ID1], "early": []}
    assert ledger.judge([(ID1, 5000, 5000, 5001)]) == {"stale": [], "early": []}
    assert ledger.judge([(ID1, 5000, 5000, 4999)])["early"] == [ID1]


def test_a_lost_answer_accepts_either_outcome():
    ledger = KeyedLedger()
    feed(ledger, f"ACK orders {ID1} {h(1000)} k1", f"RESCHEDULING_KEY orders k1 7000")
    ledger.end_trial()  # killed before the answer was printed
    assert ledger.judge([(ID1, 1000, 1000, 1000)])["stale"] == []
    assert ledger.judge([(ID1, 7000, 7000, 7000)])["stale"] == []
    assert ledger.judge([(ID1, 3000, 3000, 3000)])["stale"] == [ID1]


def test_cancel_by_key_sets_and_lost_cancels():
    ledger = KeyedLedger()
    feed(ledger, f"ACK orders {ID1} {h(1000)} k1", f"ACK orders {ID2} {h(1000, ID2)} k1",
         "CANCELLING_KEY orders k1", f"CANCELLED_KEY orders k1 {h(1000)}")
    assert ledger.cancelled_by_key == {ID1} and ledger.key_cancels == 1
    feed(ledger, "CANCELLING_KEY orders k1")
    ledger.end_trial()
    assert ledger.cancel_unknown == {ID1, ID2}
