"""``NativeServer``: the gRPC front's own transport, HTTP/2 in C, calls on the front's event loop.

grpcio spends about 0.3 ms of CPU on every unary call in this process, before any handler runs
(docs/DECISIONS.md "where grpc's floor is"): each call's four completions cross grpc's I/O
thread, grpc.aio's poller and the event loop. This transport reads and writes the sockets on the
front's own loop (one ``asyncio.Protocol`` per connection) and leaves HTTP/2 to
``rocks_timer._native.h2`` (libnghttp2 underneath: framing, HPACK, flow control, SETTINGS, PING,
GOAWAY). A read is fed to the codec once; the calls it completes run at once; everything they
answered is written once.

It serves the same servicer objects grpcio serves (``MessagingService``, ``MetricsSink``), whose
methods are grpc.aio-shaped: ``async def`` (unary) or async generators (streamed answers), taking
(request, context). A unary handler is stepped in place: when it finishes without waiting (a
send or an ack run on the loop's thread by ``BrokerCalls``) its answer is queued before the read
returns, with no task; one that waits continues as a task. Streamed answers (ReceiveMessage's
long polls, Telemetry) are tasks. ``CallContext`` offers what the handlers use of grpc's context.

Bounds, as the grpcio front has them (ARCHITECTURE §4): calls in progress in all
(``max_calls``: RESOURCE_EXHAUSTED past it), streams per connection (SETTINGS_MAX_CONCURRENT_STREAMS;
nghttp2 refuses the excess with REFUSED_STREAM), message size (RESOURCE_EXHAUSTED, answered by the
codec), request bytes held in reassembly per connection (the codec's ``max_buffered``),
request headers (16 KiB; the stream is reset), connections (``max_connections``; the excess is
closed at once), idle connections (closed after ``idle_s`` without a call), queued request
messages of one stream and unsent answer bytes (the handler waits for the client to read). The per-connection limits of the handlers (``PeerLimits``) key on ``CallContext.peer()``.
"""
from __future__ import annotations

import asyncio
import base64
import functools
import logging
import socket
from collections import deque
from collections.abc import Coroutine
from typing import Any, Callable

from google.protobuf import message_factory
from google.protobuf.message import DecodeError

from rocks_timer.front_calls import Resumed

try:
    from rocks_timer._native import h2 as _h2
except ImportError:  # built only where nghttp2's header is installed (setup.py)
    _h2 = None

log = logging.getLogger(__name__)

AVAILABLE = _h2 is not None
UNARY, STREAM_OUT, BIDI = "unary", "server-streaming", "bidi"
MAX_STREAMS_PER_CONNECTION = 256   # above PeerLimits' 16 streams + 128 calls, which answer first
MAX_HEADER_BYTES = 16 * 1024
WINDOW = 1 << 20                   # the receive window a client may fill before we read
MAX_QUEUED_REQUESTS = 256          # request messages of one stream not yet taken by its handler
MAX_UNSENT = 256 * 1024            # answer bytes of one stream the client has not taken yet

# gRPC status codes (the transport's own answers; handlers give grpc.StatusCode)
OK, UNKNOWN, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED = 0, 2, 4, 8


class Aborted(Exception):
    """``await context.abort(code, details)``: ends the call with that status."""

    def __init__(self, code: int, details: str):
        super().__init__(code, details)
        self.code, self.details = code, details


def status_number(code: Any) -> int:
    """A grpc.StatusCode (its value is ``(number, name)``) or a plain number."""
    value = getattr(code, "value", code)
    return int(value[0] if isinstance(value, tuple) else value)


class Method:
    """One RPC: its path, its servicer method, its request class and its shape."""

    __slots__ = ("name", "path", "handler", "request", "kind")

    def __init__(self, name: str, path: bytes, handler: Callable, request: type, kind: str):
        self.name, self.path, self.handler, self.request, self.kind = (
            name, path, handler, request, kind)


def methods_of(service_descriptor, servicer) -> list[Method]:
    """The RPCs of ``service_descriptor`` (a protobuf ServiceDescriptor), bound to ``servicer``.
    Client-streaming-only RPCs are not served (no service here has one)."""
    found = []
    for rpc in service_descriptor.methods:
        if rpc.client_streaming and not rpc.server_streaming:
            raise ValueError(f"{rpc.full_name}: client-streaming RPCs are not served")
        kind = BIDI if rpc.client_streaming else STREAM_OUT if rpc.server_streaming else UNARY
        found.append(Method(rpc.name, f"/{service_descriptor.full_name}/{rpc.name}".encode(),
                            getattr(servicer, rpc.name),
                            message_factory.GetMessageClass(rpc.input_type), kind))
    return found


class CallContext:
    """What the handlers use of grpc.aio's ServicerContext, for one call."""

    __slots__ = ("_peer", "_metadata", "_deadline", "_loop")

    def __init__(self, peer: str, metadata: list | None, deadline: float | None, loop):
        self._peer, self._metadata, self._deadline, self._loop = peer, metadata, deadline, loop

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self) -> tuple:
        """The request's custom headers; ``-bin`` values base64-decoded, as grpcio gives them."""
        pairs = []
        for name, value in self._metadata or ():
            if name.endswith("-bin") and isinstance(value, str):
                try:
                    value = base64.b64decode(value + "=" * (-len(value) % 4))
                except ValueError:
                    continue
            pairs.append((name, value))
        return tuple(pairs)

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - self._loop.time())

    async def abort(self, code, details: str = "", trailing_metadata=()) -> None:
        raise Aborted(status_number(code), details)


class _Requests:
    """A request stream's messages for its handler (``async for``): fed by the connection."""

    __slots__ = ("parse", "queue", "waiter", "ended")

    def __init__(self, parse: Callable[[bytes], Any]):
        self.parse = parse
        self.queue: deque = deque()
        self.waiter: asyncio.Future | None = None
        self.ended = False

    def push(self, message: bytes) -> bool:
        """False when the handler is too far behind (the call is then refused)."""
        if len(self.queue) >= MAX_QUEUED_REQUESTS:
            return False
        self.queue.append(message)
        self._wake()
        return True

    def end(self) -> None:
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def __aiter__(self):
        return self

    async def __anext__(self):
        while not self.queue:
            if self.ended:
                raise StopAsyncIteration
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        return self.parse(self.queue.popleft())


class _Call:
    """A call that runs as a task: its task, its request stream, its deadline timer."""

    __slots__ = ("task", "requests", "timer")

    def __init__(self, requests: _Requests | None = None):
        self.task: asyncio.Task | None = None
        self.requests = requests
        self.timer: asyncio.TimerHandle | None = None


class NativeServer:
    """Serves ``methods`` over h2c (HTTP/2 without TLS, prior knowledge) on the running loop."""

    def __init__(self, methods: list[Method], *, max_message: int, max_calls: int,
                 idle_s: float, max_connections: int = 1_000,
                 max_streams: int = MAX_STREAMS_PER_CONNECTION):
        if not AVAILABLE:
            raise RuntimeError("the native HTTP/2 codec is not built (rocks_timer._native.h2)")
        self.single = {m.path: m for m in methods if m.kind != BIDI}
        self.streaming = {m.path: m for m in methods if m.kind == BIDI}
        self.max_message, self.max_calls, self.idle_s = max_message, max_calls, idle_s
        self.max_connections, self.max_streams = max_connections, max_streams
        self.calls = 0           # calls in progress, all connections (the front's loop only)
        self.refused_connections = 0
        self.connections: set[_Connection] = set()
        self._server: asyncio.AbstractServer | None = None

    def codec(self):
        return _h2.Connection(self.single, self.streaming, self.max_message, self.max_streams,
                              MAX_HEADER_BYTES, WINDOW)

    async def start(self, listener: socket.socket) -> None:
        """Serve connections accepted on ``listener`` (bound and listening)."""
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Connection(self), sock=listener)

    async def stop(self, grace: float) -> None:
        """No new connections or calls; calls in progress get ``grace`` seconds, then end."""
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.goaway()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self.calls and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for connection in list(self.connections):
            connection.abort()
        if self._server is not None:
            await self._server.wait_closed()


class _Connection(asyncio.Protocol):
    """One client connection: its codec, its calls that run as tasks, its idle timer."""

    def __init__(self, server: NativeServer):
        self.server = server
        self.codec = server.codec()
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.peer = ""
        self.calls: dict[int, _Call] = {}
        self.last_call = self.loop.time()
        self.idle_timer: asyncio.TimerHandle | None = None
        self.flush_soon = False
        self.paused = False            # the transport's buffer is full (pause_writing)
        self.drained = asyncio.Event()  # set at each write: streamed answers look again
        self.closed = False

    # -- the socket ------------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        server = self.server
        if len(server.connections) >= server.max_connections:
            server.refused_connections += 1
            self.closed = True
            transport.abort()
            return
        server.connections.add(self)
        address = transport.get_extra_info("peername") or ("", 0)
        host, port = address[0], address[1]
        self.peer = f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"
        self.idle_timer = self.loop.call_later(server.idle_s, self._idle_check)
        self._flush()  # the server's SETTINGS

    def data_received(self, data: bytes) -> None:
        try:
            events = self.codec.feed(data)
        except Exception:  # noqa: BLE001 - a codec failure ends this connection, not the front
            log.exception("gRPC connection %s: the HTTP/2 codec failed; closing it", self.peer)
            self.abort()
            return
        for event in events:
            kind = event[0]
            if kind == 0:  # CALL
                self._call(*event[1:])
            elif kind == 1:  # MESSAGE
                call = self.calls.get(event[1])
                if call is not None and call.requests is not None and not call.requests.push(
                        event[2]):
                    self._end_call(event[1], RESOURCE_EXHAUSTED,
                                   "too many request messages waiting for the handler")
            elif kind == 2:  # END
                call = self.calls.get(event[1])
                if call is not None and call.requests is not None:
                    call.requests.end()
            else:  # RESET
                call = self.calls.get(event[1])
                if call is not None and call.task is not None:
                    call.task.cancel()
        self._flush()

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.server.connections.discard(self)
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        for call in list(self.calls.values()):
            if call.task is not None:
                call.task.cancel()
        self.drained.set()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.drained.set()

    def _flush(self) -> None:
        self.flush_soon = False
        if self.closed:
            return
        out = self.codec.take()
        if out:
            self.transport.write(out)
        if not self.paused:
            self.drained.set()
        if self.codec.done:
            self.closed = True
            self.transport.close()

    def _flush_later(self) -> None:
        """Writes of tasks are gathered: one write per loop iteration for all of them."""
        if not self.flush_soon:
            self.flush_soon = True
            self.loop.call_soon(self._flush)

    def goaway(self) -> None:
        self.codec.goaway()
        self._flush()

    def abort(self) -> None:
        if not self.closed:
            self.codec.close()
            self._flush()
            self.closed = True
            self.transport.abort()

    def _idle_check(self) -> None:
        idle_for = self.loop.time() - self.last_call
        if not self.calls and idle_for >= self.server.idle_s:
            self.codec.close()  # GOAWAY, then the socket closes once it is written
            self._flush()
            if not self.closed:
                self.closed = True
                self.transport.close()
            return
        wait = self.server.idle_s - idle_for if not self.calls else self.server.idle_s
        self.idle_timer = self.loop.call_later(max(wait, 0.01), self._idle_check)

    # -- calls -----------------------------------------------------------------------------------
    def _call(self, sid: int, method: Method, metadata, timeout_s: float, message) -> None:
        server = self.server
        self.last_call = self.loop.time()
        if server.calls >= server.max_calls:
            self.codec.finish(sid, RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded")
            return
        deadline = self.last_call + timeout_s if timeout_s >= 0 else None
        context = CallContext(self.peer, metadata, deadline, self.loop)
        if method.kind == BIDI:
            requests = _Requests(method.request.FromString)
            self._start(sid, self._stream_out(sid, method.handler(requests, context)),
                        deadline, requests)
            return
        try:
            request = method.request.FromString(message)
        except DecodeError as exc:  # UNKNOWN, as grpcio answers a request it cannot parse
            self.codec.finish(sid, UNKNOWN, f"Unexpected {type(exc)}: {exc}")
            return
        if method.kind == STREAM_OUT:
            self._start(sid, self._stream_out(sid, method.handler(request, context)), deadline)
            return
        # stepped here: most unary calls end without waiting, and then need no task
        try:
            coro = method.handler(request, context)
            if not isinstance(coro, Coroutine):  # a plain function's answer (grpc.aio takes it)
                self._answer(sid, coro)
                return
            waits_for = coro.send(None)
        except StopIteration as done:
            self._answer(sid, done.value)
            return
        except BaseException as exc:  # noqa: BLE001 - every failure is a status
            self._end_call(sid, *_status_of(exc))
            return
        self._start(sid, self._unary_rest(sid, Resumed(coro, waits_for)), deadline)

    def _start(self, sid: int, work, deadline: float | None,
               requests: _Requests | None = None) -> None:
        call = _Call(requests)
        self.calls[sid] = call
        self.server.calls += 1
        call.task = self.loop.create_task(work)
        # a callback, not the coroutine's own finally: a task cancelled before its first step
        # (a reset that came in the same read as the call) never runs its body
        call.task.add_done_callback(functools.partial(self._done, sid))
        if deadline is not None:
            call.timer = self.loop.call_at(deadline, self._expire, sid)

    def _expire(self, sid: int) -> None:
        call = self.calls.get(sid)
        if call is not None and call.task is not None:
            call.task.cancel()
            self._end_call(sid, DEADLINE_EXCEEDED, "Deadline Exceeded")

    def _done(self, sid: int, task: asyncio.Task) -> None:
        call = self.calls.pop(sid, None)
        if call is not None:
            self.server.calls -= 1
            if call.timer is not None:
                call.timer.cancel()
        self.last_call = self.loop.time()

    def _answer(self, sid: int, response) -> None:
        try:
            payload = response.SerializeToString()
        except Exception as exc:  # noqa: BLE001 - a handler that returned no message
            self._end_call(sid, *_status_of(exc))
            return
        self.codec.reply(sid, payload)

    def _end_call(self, sid: int, code: int, details: str) -> None:
        self.codec.finish(sid, code, details)
        self._flush_later()

    async def _unary_rest(self, sid: int, rest: Resumed) -> None:
        try:
            response = await rest
        except asyncio.CancelledError:
            return
        except BaseException as exc:  # noqa: BLE001 - every failure is a status
            self._end_call(sid, *_status_of(exc))
        else:
            self._answer(sid, response)
            self._flush_later()

    async def _stream_out(self, sid: int, responses) -> None:
        """Sends what an async generator yields, then its status; waits while the client has
        not taken ``MAX_UNSENT`` bytes of this stream (flow control) or the socket is full."""
        codec = self.codec
        try:
            try:
                async for response in responses:
                    if not codec.send(sid, response.SerializeToString()):
                        return  # reset or refused meanwhile
                    self._flush_later()
                    while (codec.pending(sid) > MAX_UNSENT or self.paused) and not self.closed:
                        self.drained.clear()  # set by the next write or window update
                        await self.drained.wait()
            finally:
                await responses.aclose()
        except asyncio.CancelledError:
            return
        except BaseException as exc:  # noqa: BLE001 - every failure is a status
            self._end_call(sid, *_status_of(exc))
        else:
            self._end_call(sid, OK, "")


def _status_of(exc: BaseException) -> tuple[int, str]:
    if isinstance(exc, Aborted):
        return exc.code, exc.details
    log.error("a gRPC handler raised", exc_info=exc)
    return UNKNOWN, f"Unexpected {type(exc)}: {exc}"


__all__ = ["AVAILABLE", "Aborted", "CallContext", "Method", "NativeServer", "methods_of"]
