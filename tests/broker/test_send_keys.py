"""Message keys are held at send to the rule ``find`` applies (``routing.validate_key``), on every
way in: the library (one send, a batch on the native path), the CLI, the running broker's Unix
socket. A key refused at find but accepted at send could never be found or cancelled, and made
``check`` fail for ever (issue #30)."""
from __future__ import annotations

import json
import socket

import pytest

from cli.remote import BrokerSocketServer
from rocks_timer import Broker, BrokerConfig, InvalidMessageError, Message
from rocks_timer.routing import MAX_KEY_BYTES, validate_key
from tests.tools.test_cli import assert_one_line_error, rt, rt_json

BAD_KEYS = ["", "a b", " ", "tab\there", "new\nline", "esc\x1b[31m", "del\x7f", "c1\x85",
            "x" * (MAX_KEY_BYTES + 1), "\u00e9" * (MAX_KEY_BYTES // 2 + 1)]
GOOD_KEYS = ["order-42", "\u00e9t\u00e9", "a|b", "x" * 30_000, "\u3000wide"]  # props: < 32 KiB


def nothing_pending(broker: Broker) -> bool:
    return broker.scan() == [] and broker.timer.pending_count() == 0


@pytest.mark.parametrize("engine", ["rocksdb", "memory"])
def test_send_refuses_exactly_the_keys_find_refuses(make_broker, clock, engine):
    broker = make_broker(engine)
    for key in BAD_KEYS:
        with pytest.raises(InvalidMessageError, match="key"):
            broker.find("orders", key)
        with pytest.raises(InvalidMessageError, match="key"):
            broker.send(Message("orders", b"x", keys=(key,)), delay_ms=60_000)
        with pytest.raises(InvalidMessageError, match="key"):
            broker.send(Message("orders", b"x", keys=("fine", key)))  # immediate too
        with pytest.raises(InvalidMessageError, match="key"):
            broker.cancel_by_key("orders", key)
    assert nothing_pending(broker) and broker.messages.max_offset == 0
    for key in GOOD_KEYS:
        sent = broker.send(Message("orders", b"x", keys=(key,)), delay_ms=60_000)
        assert [e.msg_id for e in broker.find("orders", key)] == [sent.msg_id]
    assert broker.check().ok


def test_a_batch_with_one_bad_key_stores_nothing(make_broker):
    broker = make_broker("rocksdb")
    batch = [Message("orders", b"x", keys=(f"k{i}",)) for i in range(50)]
    batch[37] = Message("orders", b"x", keys=("bad key",))
    for schedule in ({"delay_ms": 60_000}, {}, {"deliver_at_ms": 1}):
        with pytest.raises(InvalidMessageError, match="'bad key'"):
            broker.send_batch(batch, **schedule)
    assert nothing_pending(broker) and broker.messages.max_offset == 0
    # the error of an earlier message still comes first, as message by message
    batch[3] = Message("bad topic", b"x")
    with pytest.raises(InvalidMessageError, match="topic"):
        broker.send_batch(batch, delay_ms=60_000)


def test_keys_split_from_the_keys_property_are_fine(make_broker):
    broker = make_broker("rocksdb")
    sent = broker.send(Message("orders", b"x", properties={"KEYS": "  a  b "}), delay_ms=60_000)
    assert [e.msg_id for e in broker.find("orders", "b")] == [sent.msg_id]


def test_validate_key_is_public_and_names_the_key():
    assert validate_key("order-42") == "order-42"
    with pytest.raises(InvalidMessageError, match="'a b'"):
        validate_key("a b")
    with pytest.raises(InvalidMessageError, match="not a string"):
        validate_key(42)


@pytest.mark.parametrize("key", ["", "a b", "esc\x1b[2J"])
def test_cli_send_refuses_a_bad_key_and_stores_nothing(tmp_path, key):
    data = tmp_path / "data"
    assert_one_line_error(rt(data, "send", "orders", "x", "--delay", "1h", "--key", key,
                             code=None), "key")
    rt_json(data, "send", "orders", "y", "--delay", "1h", "--key", "ok")
    assert len(rt_json(data, "scan")) == 1
    assert "ok: every invariant holds" in rt(data, "check").stdout


def test_socket_send_refuses_a_bad_key(tmp_path):
    with Broker.open(tmp_path / "d", BrokerConfig(timer_engine="rocksdb")) as broker, \
            BrokerSocketServer(broker, tmp_path / "d") as server:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(30)
            sock.connect(str(server.path))
            for keys in (["a b"], [""], ["ok", "x\ty"]):
                request = {"op": "send", "args": {"topic": "orders", "body": "x",
                                                  "delay_ms": 60_000, "keys": keys}}
                sock.sendall(json.dumps(request).encode() + b"\n")
                reply = json.loads(sock.makefile("rb").readline())
                assert not reply["ok"] and reply["error"]["type"] == "InvalidMessageError"
                assert "key" in reply["error"]["message"]
        assert broker.scan() == [] and broker.check().ok
