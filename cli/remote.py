"""Talking to a running broker over ``<data>/rtimer.sock`` (a Unix socket, mode 0600).

Protocol: one JSON line per request, ``{"op": "scan", "args": {...}}``, answered by one JSON line,
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {"type": "InvalidHandleError",
"message": "..."}}``. The server runs each op through :data:`cli.ops.OPS`, the same functions the
direct path calls, one request at a time per connection; the socket file is removed on stop.
"""
from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
from pathlib import Path
from typing import Any

from rocks_timer import Broker, errors
from rocks_timer.errors import RocksTimerError, StoreClosedError

from cli import ops

SOCKET_NAME = "rtimer.sock"
MAX_LINE = 16 << 20
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


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        server: BrokerSocketServer = self.server  # type: ignore[assignment]
        while line := self.rfile.readline(MAX_LINE + 1):
            if len(line) > MAX_LINE:
                reply = {"ok": False, "error": {"type": "InvalidMessageError",
                                                "message": f"request over {MAX_LINE} bytes"}}
                self.wfile.write(json.dumps(reply).encode() + b"\n")
                return  # the rest of that line cannot be framed: drop the connection
            reply = server.answer(line)
            self.wfile.write(json.dumps(reply, default=str).encode() + b"\n")
            self.wfile.flush()


class BrokerSocketServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Owns the socket of one running broker: answers requests with :data:`cli.ops.OPS`."""

    daemon_threads = True

    def __init__(self, broker: Broker, data_dir: Path):
        self.broker = broker
        self.data_dir = Path(data_dir)
        self.path = socket_path(self.data_dir)
        self._op_lock = threading.Lock()  # consumer offsets are read-modify-write
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

    def run_op(self, name: str, args: dict[str, Any]) -> Any:
        """Run one op of :data:`cli.ops.OPS` (one at a time) and return its JSON document."""
        op = ops.OPS.get(name)
        if op is None:
            raise RemoteError(f"unknown op {name!r}; known: {', '.join(ops.OPS)}")
        with self._op_lock:
            if self._stopped:
                raise StoreClosedError(f"the broker on {self.data_dir} is stopping")
            result = op(self.broker, self.data_dir, **args)
        return json.loads(json.dumps(result, default=str))

    def answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
            return {"ok": True, "result": self.run_op(request.get("op"), request.get("args") or {})}
        except (RocksTimerError, ValueError, TypeError) as exc:
            return {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc)}}
        except Exception as exc:  # noqa: BLE001 - the server answers, it does not die
            return {"ok": False, "error": {"type": type(exc).__name__,
                                           "message": f"{type(exc).__name__}: {exc}"}}

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
        self._file.write(json.dumps({"op": op, "args": args}).encode() + b"\n")
        self._file.flush()
        line = self._file.readline()
        if not line:
            raise RemoteError("the running broker closed the connection without answering")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise _error_from(reply.get("error") or {})
        return reply["result"]

    def close(self) -> None:
        self._file.close()
        self._sock.close()

    def __enter__(self) -> "BrokerClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
