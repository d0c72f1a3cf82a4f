"""Talking to a running broker over ``<data>/rtimer.sock`` (a Unix socket, mode 0600).

Protocol: one JSON line per request, ``{"op": "scan", "args": {...}}``, answered by one JSON line,
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {"type": "InvalidHandleError",
"message": "..."}}``. The server runs each op through :data:`cli.ops.OPS`, the same functions the
direct path calls, one request at a time per connection; the socket file is removed on stop.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rocks_timer import Broker, errors
from rocks_timer.errors import RocksTimerError, StoreClosedError

from . import ops

log = logging.getLogger(__name__)
SOCKET_NAME = "rtimer.sock"
MAX_LINE = 16 << 20  # one request (a send of a 4 MiB body, JSON-escaped, fits)
LINE_ROOM = 1 << 20  # a send's arguments besides its body: topic, keys, properties (< 32 KiB)
MAX_CONNECTIONS = 128
IDLE_TIMEOUT_S = 60.0
MAX_BUFFERED_BYTES = 64 << 20  # unanswered request bytes across every client
LISTEN_BACKLOG = 1024
RECV_BYTES = 64 << 10
MAX_BAD_LINES = 8  # a client whose requests are not JSON this many times in a row is closed
CONNECT_TIMEOUT_S = 2.0
CALL_TIMEOUT_S = 300.0


def socket_path(data_dir: Path) -> Path:
    return Path(data_dir) / SOCKET_NAME


class RemoteError(RocksTimerError):
    """An error the running broker answered with that is not one of the library's own."""


def _error_from(payload: dict[str, Any]) -> RocksTimerError:
    kind = getattr(errors, str(payload.get("type")), None)
    message = str(payload.get("message", "the running broker gave no reason"))
    if isinstance(kind, type) and issubclass(kind, RocksTimerError):
        return kind(message)
    return RemoteError(message)


class _Connection:
    """One client of the server: its socket, what it has sent but not yet framed, and when it
    last did anything (the least recently active idle one makes room at the cap)."""

    __slots__ = ("sock", "buffer", "pos", "accounted", "last_active", "busy", "evicted",
                 "bad_lines")

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = bytearray()  # bytes received; those before ``pos`` are answered
        self.pos = 0
        self.accounted = 0  # of the server's buffered-bytes total, this client's share
        self.bad_lines = 0  # undecodable requests in a row
        self.last_active = time.monotonic()
        self.busy = False
        self.evicted = False


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.server.serve_connection(self.request)  # type: ignore[attr-defined]


class BrokerSocketServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Owns the socket of one running broker: answers requests with :data:`cli.ops.OPS`.

    Bounded (ARCHITECTURE §4): at most ``max_connections`` clients, each on its own thread; when a
    new client arrives at the cap, the client idle the longest is closed (and told why) to make
    room, and if every client is in the middle of a request the newcomer is refused with one
    JSON line saying so. A client silent for ``idle_timeout_s`` is closed. Request bytes
    buffered across all clients stay under ``max_buffered_bytes`` (a request line under
    ``max_line``: ``MAX_LINE``, or a send of a ``max_message_size`` body if that is longer); a
    client that would pass either is answered with an error and closed.
    Arguments are held to the CLI's bounds (:mod:`cli.bounds`). A client that goes away is
    logged as one line, never a traceback.
    """

    daemon_threads = True
    block_on_close = False  # stop() closes every client itself, then nothing is left to join
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, broker: Broker, data_dir: Path, *, max_connections: int = MAX_CONNECTIONS,
                 idle_timeout_s: float = IDLE_TIMEOUT_S,
                 max_buffered_bytes: int | None = None):
        self.broker = broker
        # a send of the largest body the broker takes fits in one line, base64 included
        # (`rtimer send --body-file`), so a larger max_message_size gets longer lines
        self.max_line = max(MAX_LINE, 4 * -(-broker.config.max_message_size // 3) + LINE_ROOM)
        if max_buffered_bytes is None:
            max_buffered_bytes = max(MAX_BUFFERED_BYTES, 2 * self.max_line)
        self.data_dir = Path(data_dir)
        self.path = socket_path(self.data_dir)
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.max_buffered_bytes = max_buffered_bytes
        self._op_lock = threading.Lock()  # consumer offsets are read-modify-write
        self._conn_lock = threading.Lock()
        self._conns: dict[socket.socket, _Connection] = {}
        self._buffered = 0
        self.counters = {"accepted": 0, "refused": 0, "evicted": 0, "idle_closed": 0,
                         "over_limit": 0, "disconnected": 0}
        self.requests: dict[str, int] = {}  # per op (``run_op``); "unknown" for the others
        self.errors: dict[str, int] = {}
        if self.path.exists() or self.path.is_symlink():
            self.path.unlink()  # stale: we hold the data-dir lock, so nobody else serves it
        old_umask = os.umask(0o177)  # the socket is born 0600; nobody else can connect
        try:
            super().__init__(str(self.path), _Handler)
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)
        self._thread: threading.Thread | None = None
        self._stopped = False

    # -- connections ------------------------------------------------------------------------
    def process_request(self, request: socket.socket, client_address: Any) -> None:
        """Admit a client (making room at the cap if an idle one can go) or refuse it."""
        with self._conn_lock:
            if len(self._conns) >= self.max_connections and not self._evict_idle_locked():
                self.counters["refused"] += 1
                refuse = True
            else:
                self._conns[request] = _Connection(request)
                self.counters["accepted"] += 1
                refuse = False
        if refuse:
            _send_quietly(request, _error_line(
                "ServerBusyError", f"the broker on {self.data_dir} serves {self.max_connections} "
                "connections (its cap) and all are busy; try again"))
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def _evict_idle_locked(self) -> bool:
        idle = [c for c in self._conns.values()
                if not c.busy and c.pos == len(c.buffer) and not c.evicted]
        if not idle:
            return False
        victim = min(idle, key=lambda c: c.last_active)
        victim.evicted = True
        self.counters["evicted"] += 1
        _send_quietly(victim.sock, _error_line(
            "ServerBusyError", f"closed: the broker is at its cap of {self.max_connections} "
            "connections and this one was the longest idle"))
        try:
            victim.sock.shutdown(socket.SHUT_RDWR)  # wakes its thread, which then cleans up
        except OSError:
            pass
        del self._conns[victim.sock]  # its thread releases its bytes (``_forget``)
        return True

    def serve_connection(self, sock: socket.socket) -> None:
        conn = self._conns.get(sock)
        if conn is None:
            return  # evicted before its thread started
        sock.settimeout(self.idle_timeout_s)
        reason = None
        try:
            while (line := self._read_line(conn)) is not None:
                conn.busy = True
                reply = self.answer(line)
                bad = reply.pop("bad_request", False)
                conn.last_active = time.monotonic()  # before the client can see the answer
                sock.sendall(json.dumps(reply, default=str).encode() + b"\n")
                conn.busy = False
                conn.bad_lines = conn.bad_lines + 1 if bad else 0
                if conn.bad_lines >= MAX_BAD_LINES:
                    raise _Refused(f"{MAX_BAD_LINES} requests in a row were not JSON objects")
        except _Refused as exc:
            self.counters["over_limit"] += 1
            _send_quietly(sock, _error_line("ServerBusyError", str(exc)))
            reason = str(exc)
        except socket.timeout:
            self.counters["idle_closed"] += 1
            reason = f"idle for {self.idle_timeout_s:g} s"
        except OSError as exc:  # reset, broken pipe: the client went away
            self.counters["disconnected"] += 1
            reason = f"gone ({exc.strerror or type(exc).__name__})"
        finally:
            self._forget(conn)
        if reason is not None and not conn.evicted:
            log.warning("rtimer socket: closed a client connection: %s", reason)

    def _read_line(self, conn: _Connection) -> bytes | None:
        """The next request line of ``conn`` (newline excluded); None at the end of the stream
        (a partial line left over is logged: the client went away mid-request)."""
        while True:
            newline = conn.buffer.find(b"\n", conn.pos)
            if newline >= 0:
                line = bytes(conn.buffer[conn.pos:newline])
                conn.pos = newline + 1
                return line
            if len(conn.buffer) - conn.pos > self.max_line:
                raise _Refused(f"request over {self.max_line} bytes")
            if conn.pos:  # drop what was answered, once per receive
                del conn.buffer[:conn.pos]
                self._account(conn, -conn.pos)
                conn.pos = 0
            chunk = conn.sock.recv(RECV_BYTES)
            if not chunk:
                if conn.buffer and not conn.evicted:
                    self.counters["disconnected"] += 1
                    log.warning("rtimer socket: a client went away in the middle of a request "
                                "(%d bytes unanswered)", len(conn.buffer))
                return None
            conn.last_active = time.monotonic()
            if not self._account(conn, len(chunk)):
                raise _Refused(f"the broker holds {self.max_buffered_bytes} bytes of unanswered "
                               "requests (its limit); try again")
            conn.buffer += chunk

    def _account(self, conn: _Connection, delta: int) -> bool:
        with self._conn_lock:
            if delta > 0 and self._buffered + delta > self.max_buffered_bytes:
                return False
            self._buffered += delta
            conn.accounted += delta
            return True

    def _forget(self, conn: _Connection) -> None:
        with self._conn_lock:
            if self._conns.get(conn.sock) is conn:
                del self._conns[conn.sock]
            self._buffered -= conn.accounted
            conn.accounted = 0
        conn.buffer.clear()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        log.error("rtimer socket: a client request failed: %s: %s", type(exc).__name__, exc)

    # -- requests ---------------------------------------------------------------------------
    def run_op(self, name: str, args: dict[str, Any]) -> Any:
        """Run one op of :data:`cli.ops.OPS` (one at a time) and return its JSON document."""
        if name not in ops.OPS:
            self.requests["unknown"] = self.requests.get("unknown", 0) + 1
            self.errors["unknown"] = self.errors.get("unknown", 0) + 1
            raise RemoteError(f"unknown op {name!r}; known: {', '.join(ops.OPS)}")
        with self._op_lock:  # also guards the request counters (the metrics read copies)
            self.requests[name] = self.requests.get(name, 0) + 1
            if self._stopped:
                self.errors[name] = self.errors.get(name, 0) + 1
                raise StoreClosedError(f"the broker on {self.data_dir} is stopping")
            try:
                result = ops.run(name, self.broker, self.data_dir, args)
            except Exception:
                self.errors[name] = self.errors.get(name, 0) + 1
                raise
        return json.loads(json.dumps(result, default=str))

    def request_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Requests and failed requests per op since start (for the metrics endpoint)."""
        with self._op_lock:
            return dict(self.requests), dict(self.errors)

    def answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
        except ValueError as exc:  # also a line that is not UTF-8
            return {"ok": False, "bad_request": True,
                    "error": {"type": type(exc).__name__, "message": str(exc)}}
        if not isinstance(request, dict):
            return {"ok": False, "bad_request": True, "error": {
                "type": "ValueError",
                "message": f"a request is a JSON object, got {type(request).__name__}"}}
        try:
            return {"ok": True, "result": self.run_op(request.get("op"), request.get("args") or {})}
        except (RocksTimerError, ValueError, TypeError) as exc:
            return {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc)}}
        except Exception as exc:  # noqa: BLE001 - the server answers, it does not die
            return {"ok": False, "error": {"type": type(exc).__name__,
                                           "message": f"{type(exc).__name__}: {exc}"}}

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> "BrokerSocketServer":
        self._thread = threading.Thread(target=self.serve_forever, name="rtimer-socket",
                                        kwargs={"poll_interval": 0.2}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()
        with self._conn_lock:  # clients still connected are closed, not waited for
            for sock in list(self._conns):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        with self._op_lock:  # an op still running finishes before the broker closes
            self._stopped = True
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def __enter__(self) -> "BrokerSocketServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Refused(Exception):
    """A client broke a server bound; the message says which."""


def _error_line(kind: str, message: str) -> bytes:
    return json.dumps({"ok": False, "error": {"type": kind, "message": message}}).encode() + b"\n"


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    """Best effort, never blocking: the client may be gone or not reading."""
    try:
        sock.send(data, socket.MSG_DONTWAIT)
    except OSError:
        pass


class BrokerClient:
    """A connection to a running broker's socket."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._file = sock.makefile("rwb")

    @classmethod
    def connect(cls, data_dir: Path) -> "BrokerClient | None":
        """A client, or None when no broker answers there (no socket, or a stale one)."""
        path = socket_path(data_dir)
        if not path.exists():
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(str(path))
        except OSError:  # ECONNREFUSED: a stale file left by a killed broker
            sock.close()
            return None
        sock.settimeout(CALL_TIMEOUT_S)
        return cls(sock)

    def call(self, op: str, args: dict[str, Any]) -> Any:
        try:
            self._file.write(json.dumps({"op": op, "args": args}).encode() + b"\n")
            self._file.flush()
        except OSError:
            pass  # refused or closed by the server: the line it sent first says why
        try:
            line = self._file.readline()
        except OSError:
            line = b""
        if not line:
            raise RemoteError("the running broker closed the connection without answering")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise _error_from(reply.get("error") or {})
        return reply["result"]

    def close(self) -> None:
        try:
            self._file.close()
        except OSError:
            pass  # a request the server never read (it refused or closed the connection)
        self._sock.close()

    def __enter__(self) -> "BrokerClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
