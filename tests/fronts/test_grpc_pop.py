"""Pop consumption (the gRPC front's receive/ack/change-invisible) on the broker, under a manual
clock: invisibility deadlines are timer records, so redelivery, retry topics, dead letters and
restarts follow the timer engine's promises."""
from __future__ import annotations

import base64
import json

import pytest

from tests.support.engine_helpers import DURABLE_ENGINES, ENGINES, drive
from rocks_timer import Message
from rocks_timer.errors import InvalidHandleError
from rocks_timer.pop import (InvalidInvisibleTimeError, PopService, ReceiptExpiredError,
                             ReceiptHandle, dlq_topic, retry_topic)
from rocks_timer.pop.offsets import FILE_NAME


@pytest.fixture(params=ENGINES)
def engine(request):
    return request.param


def popped_bodies(items):
    return [(p.message.body, p.delivery_attempt) for p in items]


def test_ack_forgets_and_no_ack_redelivers_with_the_next_attempt(make_broker, clock, engine):
    broker = make_broker(engine)
    pop = PopService(broker)
    broker.send(Message(topic="T", body=b"acked"))
    broker.send(Message(topic="T", body=b"dropped"))
    first = pop.pop("G", "T", 10, 5_000)
    assert popped_bodies(first) == [(b"acked", 1), (b"dropped", 1)]
    assert pop.pop("G", "T", 10, 5_000) == []  # invisible to the group meanwhile
    assert popped_bodies(pop.pop("Other", "T", 10, 5_000)) == [(b"acked", 1), (b"dropped", 1)]
    pop.ack("G", "T", first[0].receipt_handle)
    drive(broker, clock, clock.now_ms() + 4_900)
    assert pop.pop("G", "T", 10, 5_000) == []  # never early
    drive(broker, clock, clock.now_ms() + 200)
    again = pop.pop("G", "T", 10, 5_000)
    assert popped_bodies(again) == [(b"dropped", 2)]
    assert again[0].message.topic == retry_topic("G", "T") and again[0].topic == "T"
    assert again[0].message.msg_id == first[1].message.msg_id
    with pytest.raises(ReceiptExpiredError):
        pop.ack("G", "T", first[1].receipt_handle)  # its invisible time is over
    pop.ack("G", "T", again[0].receipt_handle)
    drive(broker, clock, clock.now_ms() + 60_000)
    assert pop.pop("G", "T", 10, 5_000) == []


@pytest.mark.parametrize("engine_name", ["memory", "rocksdb", "rocksdb-inline"])
def test_change_invisible_moves_the_deadline_and_replaces_the_handle(make_broker, clock,
                                                                     engine_name):
    # engines whose cancel is definite (the wheel's delete marker is not: ARCHITECTURE §4)
    broker = make_broker(engine_name)
    pop = PopService(broker)
    broker.send(Message(topic="T", body=b"slow"))
    [got] = pop.pop("G", "T", 1, 2_000)
    handle = pop.change_invisible("G", "T", got.receipt_handle, 30_000)
    assert handle != got.receipt_handle
    with pytest.raises(ReceiptExpiredError):
        pop.ack("G", "T", got.receipt_handle)
    drive(broker, clock, clock.now_ms() + 10_000)
    assert pop.pop("G", "T", 1, 2_000) == []
    newer = pop.change_invisible("G", "T", handle, 1_000)
    drive(broker, clock, clock.now_ms() + 1_100)
    assert popped_bodies(pop.pop("G", "T", 1, 2_000)) == [(b"slow", 2)]
    with pytest.raises(ReceiptExpiredError):
        pop.change_invisible("G", "T", newer, 5_000)


def test_last_attempt_goes_to_the_dead_letter_topic(make_broker, clock):
    broker = make_broker("rocksdb")
    pop = PopService(broker)
    broker.send(Message(topic="T", body=b"poison"))
    for attempt in (1, 2, 3):
        [got] = pop.pop("G", "T", 1, 1_000, max_attempts=3)
        assert got.delivery_attempt == attempt
        drive(broker, clock, clock.now_ms() + 1_100)
    assert pop.pop("G", "T", 1, 1_000, max_attempts=3) == []
    [dead] = broker.pull(dlq_topic("G"))
    assert dead.body == b"poison" and dead.properties["RETRY_TOPIC"] == "T"


def test_tag_filter_and_batch_size(make_broker):
    broker = make_broker("memory")
    pop = PopService(broker)
    for i, tag in enumerate(["a", "b", "a", None, "c"]):
        broker.send(Message(topic="T", body=str(i).encode(), tags=tag))
    assert [p.message.body for p in pop.pop("G", "T", 1, 5_000, frozenset({"a", "c"}))] == [b"0"]
    assert [p.message.body for p in pop.pop("G", "T", 9, 5_000, frozenset({"a", "c"}))] == [
        b"2", b"4"]


def test_a_receive_pops_across_every_queue_of_the_topic(make_broker):
    broker = make_broker("memory")
    pop = PopService(broker)
    for queue_id in (0, 3, 1):
        broker.send(Message(topic="T", body=b"q%d" % queue_id, queue_id=queue_id))
    assert sorted(p.message.body for p in pop.pop("G", "T", 10, 5_000)) == [b"q0", b"q1", b"q3"]


@pytest.mark.parametrize("engine_name", DURABLE_ENGINES)
def test_invisible_messages_and_offsets_survive_a_restart(make_broker, clock, tmp_path,
                                                          engine_name):
    path = tmp_path / "restart"
    broker = make_broker(engine_name, path=path)
    pop = PopService(broker)
    broker.send(Message(topic="T", body=b"in flight"))
    broker.send(Message(topic="T", body=b"acked"))
    got = pop.pop("G", "T", 2, 5_000)
    pop.ack("G", "T", got[1].receipt_handle)
    broker.close()
    broker = make_broker(engine_name, path=path)
    pop = PopService(broker)
    assert pop.pop("G", "T", 10, 5_000) == []  # the offset held; the first is still invisible
    drive(broker, clock, clock.now_ms() + 5_100)
    assert popped_bodies(pop.pop("G", "T", 10, 5_000)) == [(b"in flight", 2)]


def test_handles_are_checked_against_group_topic_and_record(make_broker):
    broker = make_broker("rocksdb")
    pop = PopService(broker)
    user = broker.send(Message(topic="T", body=b"a user's timer"), delay_ms=60_000)
    broker.send(Message(topic="T", body=b"x"))
    [got] = pop.pop("G", "T", 1, 5_000)
    for group, topic in (("H", "T"), ("G", "U")):
        with pytest.raises(InvalidHandleError):
            pop.ack(group, topic, got.receipt_handle)
    forged = ReceiptHandle("G", "T", 0, 10, user.handle).encode()
    with pytest.raises(InvalidHandleError):
        pop.ack("G", "T", forged)  # never cancels a record that is not the group's
    huge = ReceiptHandle("G", "T", 0, 1 << 40, ReceiptHandle.decode(
        got.receipt_handle).timer_handle).encode()
    with pytest.raises(InvalidHandleError):
        pop.change_invisible("G", "T", huge, 5_000)
    for junk in ("", "!!", base64.urlsafe_b64encode(b"r1 G T 1 2 nope").decode(), "x" * 5000):
        with pytest.raises(InvalidHandleError):
            pop.ack("G", "T", junk)
    assert broker.cancel(user.handle) is True
    pop.ack("G", "T", got.receipt_handle)


def test_invisible_time_bounds(make_broker):
    pop = PopService(make_broker("memory"))
    for bad in (0, 999, 12 * 3_600_000 + 1):
        with pytest.raises(InvalidInvisibleTimeError):
            pop.pop("G", "T", 1, bad)


def test_damaged_offset_file_is_set_aside(make_broker, tmp_path):
    path = tmp_path / "damaged"
    broker = make_broker("rocksdb", path=path)
    (path / "config" / FILE_NAME).write_text("{not json")
    pop = PopService(broker)
    assert (path / "config" / (FILE_NAME + ".corrupt")).exists()
    broker.send(Message(topic="T", body=b"x"))
    assert len(pop.pop("G", "T", 1, 5_000)) == 1
    table = json.loads((path / "config" / FILE_NAME).read_text())["offsetTable"]
    assert table == {"T@G": {"0": 1}}


def test_arrivals_wake_watchers_of_their_topics_only(make_broker):
    broker = make_broker("memory")
    pop = PopService(broker)
    woken = []
    token = pop.watch(pop.watched_topics("G", "T"), lambda: woken.append("T"))
    pop.watch({"U"}, lambda: woken.append("U"))
    broker.send(Message(topic="T", body=b"x"))
    assert woken == ["T"]
    pop.unwatch(token)
    broker.send(Message(topic="T", body=b"y"))
    assert woken == ["T"]
    pop.close()
    broker.send(Message(topic="U", body=b"z"))
    assert woken == ["T"]


def test_receipt_handles_encode_as_base64url_without_padding_and_parse_back():
    """``ReceiptHandle.encode`` (binascii and a translation) writes what base64's urlsafe
    encoder writes, unpadded, for every padding length; ``parse`` gives back the handle and
    its timer handle decoded."""
    from rocks_timer.timer.handles import Handle
    for n in range(6):
        timer = Handle(retry_topic("G" * (n + 1), "T"), 1_700_000_000_000 + n, "AB" * 16)
        receipt = ReceiptHandle("G" * (n + 1), "T", 10 ** n, 200 + n, timer.encode())
        text = (f"r1 {receipt.group} T {receipt.commitlog_offset} {receipt.size} "
                f"{receipt.timer_handle}")
        assert receipt.encode() == base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()
        assert ReceiptHandle.parse(receipt.encode()) == (receipt, timer)
        assert receipt.check(receipt.group, "T", timer) == timer == receipt.check(receipt.group,
                                                                                   "T")
