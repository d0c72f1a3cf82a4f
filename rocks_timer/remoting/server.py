"""``RemotingFront``: serves RocketMQ's remoting protocol for one open Broker on its own thread.

An asyncio server on a private event loop (held pulls are cheap coroutines there), with the
blocking broker calls on a small thread pool. Bounded like every other way in (ARCHITECTURE §4):
connections, frame size (16 MiB, RocketMQ's), requests in progress per connection (past it a
request answers SYSTEM_BUSY), idle time (a client heartbeats every 30 s), and the time a started
frame may take to arrive. A frame that does not parse closes its connection only; every other
connection goes on.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from rocks_timer import listen
from rocks_timer.errors import ConfigError
from rocks_timer.remoting import command as wire
from rocks_timer.remoting.codes import Response
from rocks_timer.remoting.command import RemotingCommand
from rocks_timer.remoting.namesrv import CLUSTER, NameServerRegistrar
from rocks_timer.remoting.service import SEND_CODES, RemotingService
from rocks_timer.timer.handles import TOPIC_PATTERN

log = logging.getLogger(__name__)
DEFAULT_LISTEN = "127.0.0.1:9876"
MAX_CONNECTIONS = 1_000
MAX_IN_FLIGHT = 256           # requests in progress on one connection (held pulls included)
IDLE_S = 180.0                # no frame for this long: the connection is closed
FRAME_S = 60.0                # a frame whose first bytes arrived must be whole by then
OFFSET_FLUSH_S = 1.0
READ_BYTES = 1 << 18          # what one read of a connection takes at most


def split_frames(data: bytearray) -> tuple[list[RemotingCommand], int, Exception | None]:
    """The whole frames at the start of ``data``: (commands, bytes they used, the error of
    a frame that does not parse, or None). The frames before a bad one are still answered;
    the bad one closes the connection (its length can no longer be trusted)."""
    commands, at, end = [], 0, len(data)
    try:
        while end - at >= 8:
            total, _ = wire.frame_size(bytes(data[at:at + 8]))
            if end - at < 4 + total:
                break
            commands.append(wire.decode(int.from_bytes(data[at + 4:at + 8], "big"),
                                        bytes(data[at + 8:at + 4 + total])))
            at += 4 + total
    except (wire.FrameError, ValueError, RecursionError) as exc:
        return commands, at, exc
    return commands, at, None


def parse_listen(text: str) -> tuple[str, int] | None:
    """``--remoting-listen``: ``HOST:PORT`` → (host, port); ``off`` → None."""
    return listen.parse_listen(text, "--remoting-listen")


class Connection:
    """One client connection: writes are serialised, requests in progress counted."""

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer
        self.in_flight = 0
        self.peer = writer.get_extra_info("peername")

    def send(self, cmd: RemotingCommand) -> None:
        if not self.writer.is_closing():
            self.writer.write(cmd.encode())

    def send_all(self, cmds: list[RemotingCommand]) -> None:
        """Several answers in one write (one system call for a batch's replies)."""
        if not self.writer.is_closing():
            self.writer.write(b"".join([cmd.encode() for cmd in cmds]))

    def close(self) -> None:
        self.writer.close()


class RemotingFront:
    """Serves the remoting protocol for ``broker`` on ``host:port``."""

    def __init__(self, broker, host: str, port: int, *, broker_name: str | None = None,
                 namesrv: list[tuple[str, int]] | None = None, workers: int = 8,
                 max_in_flight: int = MAX_IN_FLIGHT):
        if broker_name is not None and not TOPIC_PATTERN.match(broker_name):
            raise ConfigError(f"--broker-name {broker_name!r} is invalid; it must match "
                              "^[%|a-zA-Z0-9_-]{1,127}$ (it is also a topic name)")
        self.broker = broker
        self.host = host
        self.port = port
        self.broker_name = broker_name
        self.namesrv = namesrv or []
        self.workers = workers
        self.max_in_flight = max_in_flight
        self.service: RemotingService | None = None
        self.registrar: NameServerRegistrar | None = None
        self.rejected_connections = 0
        self.closed_for_junk = 0
        self._serving = listen.LoopThread("remoting-front", "remoting front")
        self._handlers: set[asyncio.Task] = set()  # one per open connection

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self) -> "RemotingFront":
        """Bind and serve; returns once the port is bound (``port`` then holds the real one)."""
        self._serving.start(self._serve, self.address)
        return self

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(self.workers, thread_name_prefix="remoting-broker") as executor:
            server = await asyncio.start_server(self._connection, self.host, self.port,
                                                reuse_address=True, limit=READ_BYTES)
            self.port = server.sockets[0].getsockname()[1]
            name = self.broker_name or f"rtimer-{self.port}"
            self.broker_name = name
            service = self.service = RemotingService(self.broker, executor, self.host,
                                                     self.port, name, CLUSTER)

            def arrived(topics: set[str]) -> None:  # on the CommitLog's writing thread
                if not service.watched_topics.isdisjoint(topics):
                    loop.call_soon_threadsafe(service.arrived, topics)
            self.broker.watch_arrivals(arrived)
            chores = asyncio.create_task(self._chores())
            if self.namesrv:
                self.registrar = NameServerRegistrar(self.namesrv, service.topics, name,
                                                     service.address, CLUSTER)
                self.registrar.start()
            self._serving.ready()
            try:
                await self._serving.stopping()
            finally:
                self.broker.unwatch_arrivals(arrived)
                if self.registrar is not None:
                    await self.registrar.stop()
                server.close()
                for conn in list(service.connections):
                    conn.close()
                if self._handlers:  # closed connections end their readers: wait for them
                    await asyncio.wait(list(self._handlers), timeout=5)
                chores.cancel()
                await service.flush_offsets()

    async def _chores(self) -> None:
        """Once a second: write offsets that came with pulls, sample the timer rates, drop
        clients whose heartbeats stopped."""
        service = self.service
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(OFFSET_FLUSH_S)
            try:
                await service.flush_offsets()
                service.rates.sample(loop.time())
                service.expire_clients()
            except Exception:  # noqa: BLE001 - a chore loop never dies; it logs and goes on
                log.exception("remoting chores failed")

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        service = self.service
        if len(service.connections) >= MAX_CONNECTIONS:
            self.rejected_connections += 1
            writer.close()
            return
        conn = Connection(writer)
        service.connections.add(conn)
        me = asyncio.current_task()
        self._handlers.add(me)
        tasks: set[asyncio.Task] = set()
        loop = asyncio.get_running_loop()
        pending = bytearray()  # bytes read and not yet a whole frame
        frame_deadline = 0.0   # when the frame at the head of ``pending`` must be whole
        try:
            while True:
                # A read takes whatever the socket holds: a client with many requests in
                # flight has several frames there, and its sends are stored together.
                timeout = IDLE_S if not pending else max(0.0, frame_deadline - loop.time())
                data = await asyncio.wait_for(reader.read(READ_BYTES), timeout)
                if not data:
                    break
                if not pending:
                    frame_deadline = loop.time() + FRAME_S
                pending += data
                commands, used, junk = split_frames(pending)
                if used:
                    del pending[:used]
                    if pending:  # a new frame started in this read
                        frame_deadline = loop.time() + FRAME_S
                self._dispatch(conn, commands, tasks)
                if junk is not None:
                    raise junk
        except (wire.FrameError, ValueError, RecursionError) as exc:
            self.closed_for_junk += 1
            log.info("remoting connection %s closed: %s", conn.peer, exc)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, OSError):
            pass
        finally:
            self._handlers.discard(me)
            service.connection_closed(conn)
            conn.close()

    def _dispatch(self, conn: Connection, commands: list[RemotingCommand],
                  tasks: set[asyncio.Task]) -> None:
        """Start answering ``commands`` in their order: a run of sends next to each other is
        one task (one ``Broker.send_batch``), every other request a task of its own."""
        sends: list[RemotingCommand] = []
        for cmd in commands:
            if cmd.is_response:
                continue  # clients answer nothing we wait for (our requests are oneway)
            if conn.in_flight >= self.max_in_flight:
                conn.send(cmd.response(Response.SYSTEM_BUSY, remark="too many requests in "
                                       f"progress on this connection ({self.max_in_flight})"))
                continue
            conn.in_flight += 1
            if cmd.code in SEND_CODES:
                sends.append(cmd)
                continue
            if sends:
                self._start(tasks, self._answer_sends(conn, sends))
                sends = []
            self._start(tasks, self._answer(conn, cmd))
        if sends:
            self._start(tasks, self._answer_sends(conn, sends))

    @staticmethod
    def _start(tasks: set[asyncio.Task], coro) -> None:
        task = asyncio.create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _answer(self, conn: Connection, cmd: RemotingCommand) -> None:
        try:
            response = await self.service.handle(conn, cmd)
            conn.send(response)
            await conn.writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            conn.in_flight -= 1

    async def _answer_sends(self, conn: Connection, cmds: list[RemotingCommand]) -> None:
        try:
            conn.send_all(await self.service.handle_sends(conn, cmds))
            await conn.writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            conn.in_flight -= len(cmds)

    def stop(self) -> None:
        """Unregister from NameServers, close every connection, release the port."""
        self._serving.stop(15)

    def request_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Requests and failed requests (answered with an error code) per request name since
        start (for the metrics endpoint)."""
        if self.service is None:
            return {}, {}
        requests, failures = dict(self.service.requests), dict(self.service.failures)
        return ({k: v for k, v in requests.items() if v},
                {k: v for k, v in failures.items() if v})

    def stats(self) -> dict:
        service = self.service
        return {"connections": len(service.connections) if service else 0,
                "duplicate_sends": service.recent.duplicates if service else 0,
                "closed_for_junk": self.closed_for_junk,
                "rejected_connections": self.rejected_connections,
                "registrations": self.registrar.registered if self.registrar else 0}

    def __enter__(self) -> "RemotingFront":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["RemotingFront", "parse_listen", "DEFAULT_LISTEN"]
