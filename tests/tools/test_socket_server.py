"""The running broker's socket is bounded (ARCHITECTURE §4): connection cap (the refused client is
told), idle timeout, total buffered request bytes, listen backlog, the CLI's argument bounds on
every op, and a client that goes away logged as one line."""
from __future__ import annotations

import inspect
import json
import logging
import socket
import time

import pytest

from cli import bounds, ops
from cli.remote import LISTEN_BACKLOG, MAX_BAD_LINES, BrokerClient, BrokerSocketServer
from rocks_timer import Broker, BrokerConfig
from rocks_timer.errors import InvalidArgumentError, ServerBusyError

READ_TIMEOUT_S = 30.0


@pytest.fixture
def broker(tmp_path):
    with Broker.open(tmp_path / "d", BrokerConfig(timer_engine="memory")) as opened:
        yield opened


def connect(server: BrokerSocketServer) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(READ_TIMEOUT_S)
    sock.connect(str(server.path))
    return sock


def request(sock: socket.socket, op: str, args: dict | None = None) -> dict:
    sock.sendall(json.dumps({"op": op, "args": args or {}}).encode() + b"\n")
    return read_reply(sock)


def read_reply(sock: socket.socket) -> dict:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    return json.loads(data)


def wait_until(condition, timeout_s: float = 10.0) -> None:
    """Poll the server's own state (bounded) until the bytes sent have reached it."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the server never saw the bytes sent"
        time.sleep(0.002)


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sent before it hung up (a reset after the data counts as the
    end: the server closed with our unread bytes still queued on its side)."""
    data = b""
    try:
        while chunk := sock.recv(1 << 16):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def test_bounds_cover_every_op_and_its_arguments():
    assert set(bounds.ARGUMENTS) == set(ops.OPS)
    for name, op in ops.OPS.items():
        params = [p for p in inspect.signature(op).parameters if p not in ("broker", "data_dir")]
        assert set(bounds.ARGUMENTS[name]) == set(params), name
    assert LISTEN_BACKLOG >= 128


@pytest.mark.parametrize("op,args,fragment", [
    ("send", {"topic": "t", "body": "b", "count": 300_000}, "count=300000"),
    ("send", {"topic": "t", "body": "b", "count": 0}, "count=0"),
    ("send", {"topic": "t", "body": "b", "count": True}, "count=True"),
    ("send", {"topic": "t", "body": "b", "delay_ms": -5}, "delay_ms=-5"),
    ("send", {"topic": "t", "body": "b", "delay_level": 0}, "delay_level=0"),
    ("send", {"topic": "t", "body": 5}, "body=5"),
    ("send", {"topic": "t", "body": "b", "keys": ["k", 3]}, "keys="),
    ("scan", {"limit": -1}, "limit=-1"),
    ("scan", {"limit": 2_000_000}, "limit=2000000"),
    ("scan", {"limit": 5, "to_ms": -10}, "to_ms=-10"),
    ("consume", {"topic": "t", "group": "g", "max_messages": 0}, "max_messages=0"),
    ("consume", {"topic": "t", "group": "g", "max_messages": 20_000}, "max_messages=20000"),
    ("consume", {"topic": "t", "group": "g", "queue_id": -1}, "queue_id=-1"),
    ("consume", {"topic": "t", "group": "g", "queue_id": 5000}, "queue_id=5000"),
    ("cancel", {"handles": []}, "handles=[]"),
    ("stats", {"verbose": True}, "unknown argument(s) verbose"),
])
def test_socket_ops_are_held_to_the_cli_bounds(broker, tmp_path, op, args, fragment):
    with BrokerSocketServer(broker, tmp_path / "d") as server, connect(server) as sock:
        reply = request(sock, op, args)
        assert reply["ok"] is False and reply["error"]["type"] == "InvalidArgumentError"
        assert fragment in reply["error"]["message"]
        assert request(sock, "scan", {"limit": 5})["ok"] is True  # the connection still serves
    assert broker.stats()["pending"] == 0 and broker.stats()["sent"]["immediate"] == 0


def test_direct_path_applies_the_same_bounds(broker, tmp_path):
    with pytest.raises(InvalidArgumentError, match="count=300000"):
        ops.run("send", broker, tmp_path / "d", {"topic": "t", "body": "b", "count": 300_000})


def test_cap_makes_room_by_closing_the_longest_idle_client(broker, tmp_path):
    with BrokerSocketServer(broker, tmp_path / "d", max_connections=2) as server:
        first, second = connect(server), connect(server)
        assert request(first, "scan")["ok"] and request(second, "scan")["ok"]
        assert request(first, "scan")["ok"]  # second is now the longest idle
        wait_until(lambda: not any(c.busy for c in server._conns.values()))
        with connect(server) as third:
            assert request(third, "scan")["ok"]
            told = json.loads(read_until_closed(second))
            assert told["error"]["type"] == "ServerBusyError" and "longest idle" in \
                told["error"]["message"]
            assert request(first, "scan")["ok"]
        first.close()
        second.close()
        assert server.counters["evicted"] == 1
        wait_until(lambda: not server._conns and server._buffered == 0)


def test_cap_refuses_a_client_when_every_slot_is_busy(broker, tmp_path):
    with BrokerSocketServer(broker, tmp_path / "d", max_connections=2) as server:
        busy = [connect(server) for _ in range(2)]
        for sock in busy:  # half a request each: neither is idle
            sock.sendall(b'{"op": "scan", ')
        wait_until(lambda: len(server._conns) == 2
                   and all(c.buffer for c in server._conns.values()))
        client = BrokerClient(connect(server))
        with pytest.raises(ServerBusyError, match="cap"):
            client.call("scan", {"limit": 1})
        client.close()
        for sock in busy:  # finishing the request answers it: nothing was lost meanwhile
            sock.sendall(b'"args": {"limit": 1}}\n')
            assert read_reply(sock)["ok"] is True
            sock.close()
        assert server.counters["refused"] == 1


def test_idle_clients_are_closed(broker, tmp_path):
    with BrokerSocketServer(broker, tmp_path / "d", idle_timeout_s=0.2) as server, \
            connect(server) as sock:
        assert request(sock, "scan")["ok"] is True
        assert read_until_closed(sock) == b""  # the server hung up on the silent client
        assert server.counters["idle_closed"] == 1


def test_buffered_request_bytes_are_bounded(broker, tmp_path):
    with BrokerSocketServer(broker, tmp_path / "d", max_buffered_bytes=256 << 10) as server:
        hog, fine = connect(server), connect(server)
        try:
            hog.sendall(b"x" * (200 << 10))  # no newline: held by the server
            assert request(fine, "scan")["ok"] is True
            try:
                hog.sendall(b"y" * (200 << 10))
            except OSError:
                pass  # closed while sending: the reply below is already queued
            told = json.loads(read_until_closed(hog).splitlines()[0])
            assert told["error"]["type"] == "ServerBusyError" and "limit" in \
                told["error"]["message"]
            assert request(fine, "scan")["ok"] is True
        finally:
            hog.close()
            fine.close()
        assert server.counters["over_limit"] == 1
        wait_until(lambda: not server._conns and server._buffered == 0)  # every byte released


def test_junk_lines_close_the_connection_after_a_few(broker, tmp_path):
    with BrokerSocketServer(broker, tmp_path / "d") as server, connect(server) as sock:
        sock.sendall(b"not json\n" * (MAX_BAD_LINES + 5))
        lines = read_until_closed(sock).splitlines()
        replies = [json.loads(line) for line in lines]
        assert len(replies) == MAX_BAD_LINES + 1
        assert all(r["ok"] is False and set(r) == {"ok", "error"} for r in replies)
        assert "not JSON objects" in replies[-1]["error"]["message"]


def test_disconnects_are_one_log_line_not_a_traceback(broker, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="cli.remote")
    with BrokerSocketServer(broker, tmp_path / "d") as server:
        with connect(server) as sock:  # goes away in the middle of a request
            sock.sendall(b'{"op": "sc')
        with connect(server) as sock:  # asks, then leaves before the answer is read
            sock.sendall(b'{"op": "stats"}\n')
        with connect(server) as sock:  # the server still serves
            assert request(sock, "scan")["ok"] is True
    records = [r for r in caplog.records if r.name == "cli.remote"]
    assert any("middle of a request" in r.getMessage() for r in records)
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in records)
