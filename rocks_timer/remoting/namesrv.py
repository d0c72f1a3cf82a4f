"""``NameServerRegistrar``: registers this broker with real RocketMQ NameServers.

As a RocketMQ master does: REGISTER_BROKER (103) at start, every 30 s (``registerNameServerPeriod``)
and at once when a topic is first used here, over one long-lived connection per NameServer (a
NameServer forgets a broker whose connection closes); UNREGISTER_BROKER (104) on stop. The body
is ``RegisterBrokerBody`` as JSON (uncompressed) with its CRC in ``bodyCrc32``, listing every topic
this broker serves with a data version the NameServer compares to see changes. Several rtimer
brokers (and real RocketMQ brokers) registered under one NameServer share a topic's queues:
clients spread sends over them, each broker fires its own timers. There is no replication.
"""
from __future__ import annotations

import asyncio
import json
import logging
import zlib

from rocks_timer.errors import ConfigError
from rocks_timer.remoting import command as wire
from rocks_timer.remoting.codes import Request, Response
from rocks_timer.remoting.command import RemotingCommand
from rocks_timer.remoting.topics import TopicTable

log = logging.getLogger(__name__)
REGISTER_PERIOD_S = 30.0
REQUEST_TIMEOUT_S = 5.0
BROKER_TIMEOUT_MS = 120_000
CLUSTER = "DefaultCluster"


def parse_namesrv_addrs(text: str) -> list[tuple[str, int]]:
    """``host:port[;host:port...]`` (RocketMQ's ``namesrvAddr`` form)."""
    out = []
    for part in (text or "").replace(",", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ConfigError(f"--namesrv-addr entry {part!r} must be HOST:PORT")
        out.append((host, int(port)))
    if not out:
        raise ConfigError(f"--namesrv-addr {text!r} names no NameServer")
    return out


class _Link:
    """One connection to one NameServer, with its pending requests by opaque."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.pending: dict[int, asyncio.Future] = {}
        self.reading: asyncio.Task | None = None

    async def request(self, cmd: RemotingCommand) -> RemotingCommand:
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), REQUEST_TIMEOUT_S)
            self.reading = asyncio.create_task(self._read())
        future = asyncio.get_running_loop().create_future()
        self.pending[cmd.opaque] = future
        try:
            self.writer.write(cmd.encode())
            await self.writer.drain()
            return await asyncio.wait_for(future, REQUEST_TIMEOUT_S)
        finally:
            self.pending.pop(cmd.opaque, None)

    async def _read(self) -> None:
        reader = self.reader
        try:
            while True:
                prefix = await reader.readexactly(8)
                total, _ = wire.frame_size(prefix)
                rest = await reader.readexactly(total - 4)
                reply = wire.decode(int.from_bytes(prefix[4:], "big"), rest)
                future = self.pending.get(reply.opaque)
                if reply.is_response and future is not None and not future.done():
                    future.set_result(reply)
        except (asyncio.IncompleteReadError, ConnectionError, wire.FrameError, OSError):
            pass
        finally:
            self.close()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.writer = None
        for future in self.pending.values():
            if not future.done():
                future.set_exception(ConnectionError("NameServer connection closed"))


class NameServerRegistrar:
    """Keeps this broker registered with each NameServer; runs on the front's loop."""

    def __init__(self, addrs: list[tuple[str, int]], topics: TopicTable, broker_name: str,
                 address: str, cluster: str = CLUSTER):
        self.links = [_Link(h, p) for h, p in addrs]
        self.topics = topics
        self.broker_name = broker_name
        self.address = address
        self.cluster = cluster
        self.registered = 0
        self.failures = 0
        self.last_error = ""
        self._wake = asyncio.Event()
        self._opaque = 0
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self.topics.on_new = lambda _topic: self._wake.set()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await self.register_all()
            try:
                await asyncio.wait_for(self._wake.wait(), REGISTER_PERIOD_S)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    def _next(self, code: int, ext: dict, body: bytes = b"") -> RemotingCommand:
        self._opaque += 1
        return RemotingCommand(code, opaque=self._opaque, ext={k: str(v) for k, v in
                                                               ext.items()}, body=body)

    def _register_command(self) -> RemotingCommand:
        body = json.dumps({
            "topicConfigSerializeWrapper": {
                "topicConfigTable": self.topics.topic_configs(),
                "dataVersion": {"timestamp": self.topics.version_ms,
                                "counter": self.topics.version, "stateVersion": 0}},
            "filterServerList": []}, separators=(",", ":")).encode("utf-8")
        return self._next(Request.REGISTER_BROKER, {
            "brokerName": self.broker_name, "brokerAddr": self.address,
            "clusterName": self.cluster, "haServerAddr": self.address, "brokerId": 0,
            "heartbeatTimeoutMillis": BROKER_TIMEOUT_MS, "enableActingMaster": "false",
            "compressed": "false", "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}, body)

    async def register_all(self) -> None:
        await asyncio.gather(*(self._register(link) for link in self.links))

    async def _register(self, link: _Link) -> None:
        try:
            reply = await link.request(self._register_command())
            if reply.code != Response.SUCCESS:
                raise ConnectionError(f"REGISTER_BROKER answered {reply.code}: {reply.remark}")
            self.registered += 1
        except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
            self.failures += 1
            self.last_error = f"{link.host}:{link.port}: {exc}"
            log.warning("registering with NameServer %s:%d failed: %s", link.host, link.port,
                        exc)
            link.close()

    async def stop(self) -> None:
        """Unregister from every NameServer (best effort, bounded) and close the links."""
        if self._task is not None:
            self._task.cancel()
        command = lambda: self._next(Request.UNREGISTER_BROKER, {  # noqa: E731
            "brokerName": self.broker_name, "brokerAddr": self.address,
            "clusterName": self.cluster, "brokerId": 0})

        async def one(link: _Link) -> None:
            try:
                await link.request(command())
            except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
                log.warning("unregistering from NameServer %s:%d failed: %s", link.host,
                            link.port, exc)
            finally:
                link.close()
        await asyncio.gather(*(one(link) for link in self.links))


__all__ = ["NameServerRegistrar", "parse_namesrv_addrs", "CLUSTER"]
