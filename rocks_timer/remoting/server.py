"""``RemotingFront``: serves RocketMQ's remoting protocol for one open Broker on its own thread.

An asyncio server on a private event loop (held pulls are cheap coroutines there), with the
blocking broker calls on a small thread pool. Each connection is a ``Connection`` (an asyncio
``Protocol``, ``remoting/connection.py``) that answers what needs no waiting within the read that
brought it. Bounded like every other way in (ARCHITECTURE §4): connections, frame size (16 MiB,
RocketMQ's), requests in progress per connection (past it a request answers SYSTEM_BUSY), idle
time (a client heartbeats every 30 s), and the time a started frame may take to arrive (both
closed by a sweep of the connections, ``SWEEP_S`` at most apart). A frame that does not parse
closes its connection only; every other connection goes on.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from rocks_timer import listen
from rocks_timer.errors import ConfigError
from rocks_timer.remoting.connection import Connection, ConnectionLimits, split_frames
from rocks_timer.remoting.namesrv import CLUSTER, NameServerRegistrar
from rocks_timer.remoting.service import RemotingService
from rocks_timer.timer.handles import TOPIC_PATTERN

log = logging.getLogger(__name__)
DEFAULT_LISTEN = "127.0.0.1:9876"
MAX_CONNECTIONS = 1_000
MAX_IN_FLIGHT = 256           # requests in progress on one connection (held pulls included)
IDLE_S = 180.0                # no bytes for this long: the connection is closed
FRAME_S = 60.0                # a frame whose first bytes arrived must be whole by then
SWEEP_S = 1.0                 # how often connections are checked against the two times above
OFFSET_FLUSH_S = 1.0
STOP_WAIT_S = 5.0             # at stop: how long requests still in progress may take


def parse_listen(text: str) -> tuple[str, int] | None:
    """``--remoting-listen``: ``HOST:PORT`` → (host, port); ``off`` → None."""
    return listen.parse_listen(text, "--remoting-listen")


class RemotingFront:
    """Serves the remoting protocol for ``broker`` on ``host:port``."""

    def __init__(self, broker, host: str, port: int, *, broker_name: str | None = None,
                 namesrv: list[tuple[str, int]] | None = None, workers: int = 8,
                 max_in_flight: int = MAX_IN_FLIGHT, idle_s: float = IDLE_S,
                 frame_s: float = FRAME_S, loop: str = "auto"):
        if broker_name is not None and not TOPIC_PATTERN.match(broker_name):
            raise ConfigError(f"--broker-name {broker_name!r} is invalid; it must match "
                              "^[%|a-zA-Z0-9_-]{1,127}$ (it is also a topic name)")
        self.broker = broker
        self.host = host
        self.port = port
        self.broker_name = broker_name
        self.namesrv = namesrv or []
        self.workers = workers
        self.limits = ConnectionLimits(max_in_flight, idle_s, frame_s)
        self.service: RemotingService | None = None
        self.registrar: NameServerRegistrar | None = None
        self.rejected_connections = 0
        self.closed_for_junk = 0
        self.closed_for_time = 0  # idle, or a frame not whole in time
        self._serving = listen.LoopThread("remoting-front", "remoting front", loop)

    @property
    def loop(self) -> str:
        """The event loop that serves: ``uvloop`` or ``asyncio`` (``listen.pick_loop``)."""
        return self._serving.kind

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
            server = await loop.create_server(
                lambda: Connection(self, self.service, self.limits), self.host, self.port,
                reuse_address=True, start_serving=False)
            self.port = server.sockets[0].getsockname()[1]
            name = self.broker_name or f"rtimer-{self.port}"
            self.broker_name = name
            service = self.service = RemotingService(self.broker, executor, self.host,
                                                     self.port, name, CLUSTER)
            await server.start_serving()

            def arrived(topics: set[str]) -> None:  # on the CommitLog's writing thread
                if not service.watched_topics.isdisjoint(topics):
                    loop.call_soon_threadsafe(service.arrived, topics)
            self.broker.watch_arrivals(arrived)
            chores = [asyncio.create_task(self._chores()), asyncio.create_task(self._sweep())]
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
                requests = [task for conn in service.connections for task in conn.tasks]
                for conn in list(service.connections):
                    conn.close()  # held pulls end: their connection is gone
                await asyncio.sleep(0)  # the closed connections' connection_lost
                if requests:
                    await asyncio.wait(requests, timeout=STOP_WAIT_S)
                for chore in chores:
                    chore.cancel()
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

    async def _sweep(self) -> None:
        """Close the connections that sent nothing for ``idle_s`` or left a frame unfinished
        for ``frame_s`` (checked every ``SWEEP_S``, sooner when the limits are shorter)."""
        loop = asyncio.get_running_loop()
        every = min(SWEEP_S, self.limits.idle_s / 4, self.limits.frame_s / 4)
        while True:
            await asyncio.sleep(every)
            now = loop.time()
            for conn in list(self.service.connections):
                reason = conn.overdue(now)
                if reason is not None:
                    self.closed_for_time += 1
                    log.info("remoting connection %s closed: %s", conn.peer, reason)
                    conn.close()

    # -- asked by each Connection ---------------------------------------------------------
    def accept(self, conn: Connection) -> bool:
        """A new connection: False when the front already holds ``MAX_CONNECTIONS``."""
        if len(self.service.connections) >= MAX_CONNECTIONS:
            self.rejected_connections += 1
            return False
        self.service.connections.add(conn)
        return True

    def lost(self, conn: Connection) -> None:
        self.service.connection_closed(conn)

    def refused(self, conn: Connection, exc: Exception) -> None:
        """``conn`` sent a frame that does not parse (it is closed)."""
        self.closed_for_junk += 1
        log.info("remoting connection %s closed: %s", conn.peer, exc)

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
                "closed_for_time": self.closed_for_time,
                "rejected_connections": self.rejected_connections,
                "registrations": self.registrar.registered if self.registrar else 0}

    def __enter__(self) -> "RemotingFront":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["RemotingFront", "parse_listen", "DEFAULT_LISTEN", "split_frames"]
