"""``Connection``: one client connection of the remoting front, as an asyncio ``Protocol``.

The loop hands a connection its bytes (``data_received``); the connection splits them into
frames and starts answering each request at once, on the loop's thread, within the same call:
a send stored on the loop's thread (``BrokerCalls.short``) is answered before the loop does
anything else, with no task, no extra turn of the loop and one write for all the replies the
bytes brought. Only a request that must wait (a held pull, a call on the broker's pool, a retry
waiting for its first send) goes on as a task (``start_request``).

Why not a reader coroutine per connection: a client that sends one message at a time waits for
each reply, so the reply's latency is the send rate. With ``StreamReader`` and ``wait_for`` per
read (a task per read in Python 3.11), a task per request and a drain after each write, one
send took several turns of the loop between its bytes and its reply; the real RocketMQ broker
answered the same request ~55 us sooner at the median while spending more CPU on it
(docs/DECISIONS.md "The remoting front's reply latency").

State owned here: the bytes not yet a whole frame, when bytes last came and when a started
frame must be whole (the front's sweep closes a connection past either: ``overdue``), the
requests in progress and the tasks of those that wait. Writes: a client that stops reading its
replies fills the transport's buffer; reading from it then pauses until the buffer drains, so
it cannot make the front hold ever more replies.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Coroutine

from rocks_timer.front_calls import Resumed
from rocks_timer.remoting import command as wire
from rocks_timer.remoting.codes import Response
from rocks_timer.remoting.command import RemotingCommand
from rocks_timer.remoting.service import SEND_CODES

try:  # the frames and JSON headers in C (rocks_timer/_native/remoting.c), when it was built
    from rocks_timer._native.codec import remoting_frames as _native_frames
except ImportError:  # pragma: no cover - no C compiler at install time
    _native_frames = None

# what makes a frame unreadable (its length can no longer be trusted): the connection closes
JUNK = (wire.FrameError, ValueError, RecursionError)


@dataclass(frozen=True)
class ConnectionLimits:
    """The bounds each connection holds to (ARCHITECTURE §4)."""

    max_in_flight: int   # requests in progress (held pulls included); past it SYSTEM_BUSY
    idle_s: float        # no bytes for this long: closed
    frame_s: float       # a frame whose first bytes came must be whole by then


def split_frames(data: bytearray) -> tuple[list[RemotingCommand], int, Exception | None]:
    """The whole frames at the start of ``data``: (commands, bytes they used, the error of
    a frame that does not parse, or None). The frames before a bad one are still answered;
    the bad one closes the connection (its length can no longer be trusted).

    The frames with a plain JSON header (every request the Java client sends) are split and
    decoded in C (``_native/remoting.c``, ``remoting_frames``); from the first frame it does
    not take, ``split_frames_reference`` goes on, so odd and bad frames get its answers."""
    if _native_frames is None:
        return split_frames_reference(data)
    commands, at, stopped = _native_frames(data, 0, wire.MAX_FRAME, wire.MAX_HEADER,
                                           RemotingCommand)
    if not stopped:
        return commands, at, None
    return split_frames_reference(data, at, commands)


def split_frames_reference(data: bytearray, at: int = 0,
                           commands: list[RemotingCommand] | None = None
                           ) -> tuple[list[RemotingCommand], int, Exception | None]:
    """``split_frames`` in Python, from ``at``, after ``commands`` (the reference the C is
    held equal to, tests/fronts/test_remoting_native.py)."""
    commands, end = [] if commands is None else commands, len(data)
    try:
        while end - at >= 8:
            total, _ = wire.frame_size(bytes(data[at:at + 8]))
            if end - at < 4 + total:
                break
            commands.append(wire.decode(int.from_bytes(data[at + 4:at + 8], "big"),
                                        bytes(data[at + 8:at + 4 + total])))
            at += 4 + total
    except JUNK as exc:
        return commands, at, exc
    return commands, at, None


def start_request(coro: Coroutine, tasks: set[asyncio.Task]) -> None:
    """Run ``coro`` on the caller's stack until it first waits; only if it waits does a task
    carry it on from there (``front_calls.Resumed``; kept in ``tasks`` until done)."""
    try:
        waiting = coro.send(None)
    except StopIteration:
        return
    task = asyncio.ensure_future(Resumed(coro, waiting))
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    # a task cancelled before its first step never resumed the request: it is closed then, so
    # that its ``finally`` blocks run (a no-op for a finished one)
    task.add_done_callback(lambda _: coro.close())


class Connection(asyncio.Protocol):
    """One client connection: its unparsed bytes, its deadlines, its requests in progress.

    ``front`` owns all connections and is asked through three methods: ``accept(conn)``
    (False: too many connections, this one closes), ``lost(conn)`` and ``refused(conn, exc)``
    (a frame that does not parse). ``service`` answers the requests."""

    def __init__(self, front, service, limits: ConnectionLimits):
        self.front = front
        self.service = service
        self.limits = limits
        self.transport: asyncio.Transport | None = None
        self.peer = None
        self.in_flight = 0
        self.tasks: set[asyncio.Task] = set()  # the requests that wait
        self.pending = bytearray()   # bytes read and not yet a whole frame
        self.last_read = 0.0         # loop time of the last bytes
        self.frame_deadline = 0.0    # when the frame at the head of ``pending`` must be whole
        self.outbox: list[bytes] | None = None  # replies made while bytes are handled

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        self.last_read = asyncio.get_running_loop().time()
        if not self.front.accept(self):
            transport.close()

    def data_received(self, data: bytes) -> None:
        now = asyncio.get_running_loop().time()
        self.last_read = now
        if not self.pending:
            self.frame_deadline = now + self.limits.frame_s
        self.pending += data
        commands, used, junk = split_frames(self.pending)
        if used:
            del self.pending[:used]
            if self.pending:  # a new frame started in this read
                self.frame_deadline = now + self.limits.frame_s
        self.outbox = []
        try:
            self.dispatch(commands)
        finally:
            replies, self.outbox = self.outbox, None
            if replies and not self.transport.is_closing():
                self.transport.write(b"".join(replies))
        if junk is not None:
            self.front.refused(self, junk)
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.pending.clear()
        self.front.lost(self)

    def pause_writing(self) -> None:
        self.transport.pause_reading()  # the client does not read its replies: stop reading

    def resume_writing(self) -> None:
        if not self.transport.is_closing():
            self.transport.resume_reading()

    # -- requests ---------------------------------------------------------------------------
    def dispatch(self, commands: list[RemotingCommand]) -> None:
        """Start answering ``commands`` in their order: a run of sends next to each other is
        one ``handle_sends`` (one ``Broker.send_batch``), every other request on its own."""
        sends: list[RemotingCommand] = []
        for cmd in commands:
            if cmd.is_response:
                continue  # clients answer nothing we wait for (our requests are oneway)
            if self.in_flight >= self.limits.max_in_flight:
                self.send(cmd.response(Response.SYSTEM_BUSY, remark="too many requests in "
                                       "progress on this connection "
                                       f"({self.limits.max_in_flight})"))
                continue
            self.in_flight += 1
            if cmd.code in SEND_CODES:
                sends.append(cmd)
                continue
            if sends:
                self._start_sends(sends)
                sends = []
            start_request(self._answer(cmd), self.tasks)
        if sends:
            self._start_sends(sends)

    def _start_sends(self, sends: list[RemotingCommand]) -> None:
        """A send read alone is answered at once where it can be (``answer_now``: no
        coroutine); a run of pipelined sends, or one that must wait, goes on as a request."""
        if len(sends) == 1:
            reply = self.service.answer_now(sends[0])
            if reply is not None:
                self.in_flight -= 1
                self.send(reply)
                return
        start_request(self._answer_sends(sends), self.tasks)

    async def _answer(self, cmd: RemotingCommand) -> None:
        try:
            self.send(await self.service.handle(self, cmd))
        finally:
            self.in_flight -= 1

    async def _answer_sends(self, cmds: list[RemotingCommand]) -> None:
        try:
            self.send_all(await self.service.handle_sends(self, cmds))
        finally:
            self.in_flight -= len(cmds)

    # -- writing and closing ----------------------------------------------------------------
    def send(self, cmd: RemotingCommand) -> None:
        self.send_all([cmd])

    def send_all(self, cmds: list[RemotingCommand]) -> None:
        """Write ``cmds``; while the connection's bytes are being handled, replies are
        gathered and written once at the end (one system call for a read's replies)."""
        if self.transport is None or self.transport.is_closing():
            return
        if self.outbox is not None:
            self.outbox.extend([cmd.encode() for cmd in cmds])
        else:
            self.transport.write(b"".join([cmd.encode() for cmd in cmds]))

    def overdue(self, now: float) -> str | None:
        """Why the front's sweep must close this connection at loop time ``now``, or None."""
        if self.pending and now >= self.frame_deadline:
            return f"a frame was not whole within {self.limits.frame_s:g} s"
        if now - self.last_read >= self.limits.idle_s:
            return f"no bytes for {self.limits.idle_s:g} s"
        return None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


__all__ = ["Connection", "ConnectionLimits", "split_frames", "split_frames_reference",
           "start_request"]
