"""The remoting front with many requests in flight on one connection (as the Java client sends
asynchronously): the sends read together are stored by one ``Broker.send_batch``, each answered
under its own opaque, a bad one refused alone with the error it gets when sent alone, and
nothing of it stored; a retry inside the same read is stored once."""
from __future__ import annotations

import pytest

from rocks_timer import Broker, BrokerConfig, ManualClock
from rocks_timer.remoting import RemotingFront
from rocks_timer.remoting.command import RemotingCommand
from rocks_timer.remoting.server import split_frames
from tests.fronts.test_remoting_protocol import START_MS, Raw, props

UNIQ = "0A0B0C0D0E0F1011121314151617{:04X}"


@pytest.fixture
def clock():
    return ManualClock(START_MS)


@pytest.fixture
def front(tmp_path, clock):
    broker = Broker.open(tmp_path / "data", BrokerConfig(), clock=clock)
    front = RemotingFront(broker, "127.0.0.1", 0).start()
    yield front
    front.stop()
    broker.close()


@pytest.fixture
def store_calls(front, monkeypatch):
    """Every ``Broker.send_batch`` call's message count (the real method does the work)."""
    calls: list[int] = []
    real = front.broker.send_batch

    def counted(messages, **schedule):
        calls.append(len(messages))
        return real(messages, **schedule)
    monkeypatch.setattr(front.broker, "send_batch", counted)
    return calls


def send_frame(opaque: int, topic: str, body: bytes, queue_id: int = 0, code: int = 310,
               **properties) -> bytes:
    ext = {"a": "pg", "b": topic, "e": str(queue_id), "f": "0", "g": str(START_MS), "h": "0",
           "i": props(**properties)}
    if code == 10:
        names = {"a": "producerGroup", "b": "topic", "e": "queueId", "f": "sysFlag",
                 "g": "bornTimestamp", "h": "flag", "i": "properties"}
        ext = {names[k]: v for k, v in ext.items()}
    return RemotingCommand(code, opaque, ext=ext, body=body).encode()


def pipelined(client: Raw, frames: list[bytes]) -> dict[int, RemotingCommand]:
    """Write every frame at once, read one reply per frame; replies by opaque."""
    client.send_raw(b"".join(frames))
    replies = [client.read() for _ in frames]
    assert all(r.is_response for r in replies)
    return {r.opaque: r for r in replies}


def stored_bodies(broker: Broker, topic: str) -> list[bytes]:
    return sorted(m.body for q in range(4) for m in broker.pull(topic, q, 0, 100))


def test_pipelined_sends_are_stored_together_and_answered_per_opaque(front, store_calls, clock):
    client = Raw(front.port)
    due = str(clock.now_ms() + 60_000)
    frames = [send_frame(i + 1, "P", f"m{i}".encode(), queue_id=i % 4, UNIQ_KEY=UNIQ.format(i),
                         TIMER_DELIVER_MS=due) for i in range(40)]
    replies = pipelined(client, frames)
    assert sorted(replies) == list(range(1, 41))
    assert all(r.code == 0 for r in replies.values())
    assert [replies[i + 1].ext["msgId"] for i in range(40)] == [UNIQ.format(i) for i in range(40)]
    assert [replies[i + 1].ext["queueId"] for i in range(40)] == [str(i % 4) for i in range(40)]
    handles = {r.ext["recallHandle"] for r in replies.values()}
    assert len(handles) == 40
    assert len(front.broker.scan(limit=100)) == 40
    # the 40 arrived in one or a few reads: fewer store calls than sends
    assert sum(store_calls) == 40 and len(store_calls) < 40
    client.close()


def test_a_bad_send_among_pipelined_ones_is_refused_alone(front, store_calls, clock):
    client = Raw(front.port)
    frames = [send_frame(1, "Q", b"ok1", UNIQ_KEY=UNIQ.format(1)),
              send_frame(2, "Q", b"late", UNIQ_KEY=UNIQ.format(2), TIMER_DELIVER_MS="soon"),
              send_frame(3, "Q", b"ok3", UNIQ_KEY=UNIQ.format(3), code=10),
              send_frame(4, "Q", b"badq", queue_id=9, UNIQ_KEY=UNIQ.format(4)),
              send_frame(5, "SCHEDULE_TOPIC_XXXX", b"sys", UNIQ_KEY=UNIQ.format(5)),
              send_frame(6, "Q", b"ok6", UNIQ_KEY=UNIQ.format(6))]
    replies = pipelined(client, frames)
    # the same codes and remarks as each of them sent alone
    alone = Raw(front.port)
    for opaque, data in [(2, frames[1]), (4, frames[3]), (5, frames[4])]:
        alone.send_raw(data)
        single = alone.read()
        assert replies[opaque].code == single.code == 13
        assert replies[opaque].remark == single.remark and single.remark
    assert [replies[i].code for i in (1, 3, 6)] == [0, 0, 0]
    assert replies[3].ext["msgId"] == UNIQ.format(3)
    assert stored_bodies(front.broker, "Q") == [b"ok1", b"ok3", b"ok6"]
    requests, failures = front.request_counts()
    assert requests["SEND_MESSAGE_V2"] == 5 + 3 and requests["SEND_MESSAGE"] == 1
    assert failures["SEND_MESSAGE_V2"] == 3 + 3
    client.close()
    alone.close()


def test_a_retry_in_the_same_read_is_stored_once(front, store_calls, clock):
    client = Raw(front.port)
    due = str(clock.now_ms() + 60_000)
    frame = dict(topic="R", body=b"once", UNIQ_KEY=UNIQ.format(7), TIMER_DELIVER_MS=due)
    replies = pipelined(client, [send_frame(1, **frame), send_frame(2, **frame),
                                 send_frame(3, "R", b"other", UNIQ_KEY=UNIQ.format(8),
                                            TIMER_DELIVER_MS=due)])
    assert [replies[i].code for i in (1, 2, 3)] == [0, 0, 0]
    assert replies[1].ext["recallHandle"] == replies[2].ext["recallHandle"]
    assert len(front.broker.scan()) == 2 and front.stats()["duplicate_sends"] == 1
    client.close()


def test_a_closed_broker_answers_every_pipelined_send(front, clock):
    client = Raw(front.port)
    assert client.call(105, {"topic": "C"}).code == 0  # the connection is up
    front.broker.close()
    replies = pipelined(client, [send_frame(i, "C", b"x", UNIQ_KEY=UNIQ.format(i))
                                 for i in (1, 2, 3)])
    assert [replies[i].code for i in (1, 2, 3)] == [14, 14, 14]
    client.close()


def test_frames_split_at_any_byte_and_junk_after_whole_frames():
    frames = [send_frame(i, "S", b"x" * i) for i in (1, 2, 3)]
    data = bytearray(b"".join(frames))
    ends = [sum(len(f) for f in frames[:n]) for n in range(1, 4)]
    for cut in range(len(data) + 1):
        head, used, error = split_frames(data[:cut])
        whole = sum(1 for end in ends if end <= cut)
        assert error is None and [c.opaque for c in head] == list(range(1, whole + 1))
        assert used == (ends[whole - 1] if whole else 0)
    commands, used, error = split_frames(bytearray(frames[0] + b"\x7f\xff\xff\xff" + b"x" * 8))
    assert [c.opaque for c in commands] == [1] and used == len(frames[0])
    assert error is not None


def test_requests_between_sends_keep_their_place(front, store_calls):
    """A pull written after a send, in the same write, reads what that send stored."""
    client = Raw(front.port)
    pull = RemotingCommand(11, 2, ext={"consumerGroup": "g", "topic": "O", "queueId": "0",
                                       "queueOffset": "0", "maxMsgNums": "32",
                                       "sysFlag": "0"}).encode()
    replies = pipelined(client, [send_frame(1, "O", b"first", UNIQ_KEY=UNIQ.format(1)), pull,
                                 send_frame(3, "O", b"second", UNIQ_KEY=UNIQ.format(3))])
    assert replies[1].code == 0 and replies[3].code == 0
    assert replies[2].code == 0 and b"first" in replies[2].body
    assert b"second" not in replies[2].body
    assert stored_bodies(front.broker, "O") == [b"first", b"second"]
    client.close()
