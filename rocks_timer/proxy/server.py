"""``GrpcFront``: runs the RocketMQ 5 gRPC service for one open Broker on its own thread.

The server runs on a private event loop (one thread; Telemetry streams and long polls are cheap
coroutines there), with the blocking broker calls on a small thread pool. Two transports serve
the same handlers (``MessagingService``): ``native`` (``native_server``: HTTP/2 by libnghttp2 in
C, driven by this loop; about a third of grpcio's CPU per call here) and ``grpcio``
(``grpc.aio``, the reference and the fallback where the native codec is not built).
``auto`` picks native when it is built, and logs when it falls back. It is bounded
like every other way in (ARCHITECTURE §4): concurrent RPCs, in all and per client connection
(``limits.PeerLimits``: one client cannot take every slot), request size (twice the maximum
body plus room for properties; a body over the broker's maximum is answered
MESSAGE_BODY_TOO_LARGE), idle connections, and every argument's range in the handlers. ``SO_REUSEPORT`` is off, so a second
broker asking for a port in use fails instead of silently sharing it.
"""
from __future__ import annotations

import ipaddress
import logging
import socket
from concurrent.futures import ThreadPoolExecutor

from rocks_timer import listen
from rocks_timer.errors import ConfigError
from rocks_timer.pop import PopService
from rocks_timer.proxy import metrics_sink, native_server
from rocks_timer.proxy.protocol import pb, service_pb2_grpc, svc

import grpc  # after protocol, which says which extra to install when it is missing
from rocks_timer.proxy.service import MessagingService

log = logging.getLogger(__name__)
DEFAULT_LISTEN = "127.0.0.1:8081"
MAX_CONCURRENT_RPCS = 1_000
MAX_CONNECTIONS = 1_000           # the native transport's (grpcio has no such bound)
IDLE_CONNECTION_MS = 600_000
TRANSPORTS = ("auto", "native", "grpcio")


def pick_transport(choice: str) -> str:
    """``auto`` → native when its codec is built, else grpcio (logged); ``native`` without the
    codec is a ConfigError."""
    if choice not in TRANSPORTS:
        raise ConfigError(f"--grpc-server must be one of {', '.join(TRANSPORTS)}, not {choice!r}")
    if choice == "grpcio" or (choice == "auto" and not native_server.AVAILABLE):
        if choice == "auto":
            log.warning("the native HTTP/2 codec (rocks_timer._native.h2) is not built (nghttp2's"
                        " header was missing at install: apt-get install libnghttp2-dev, then "
                        "reinstall); the gRPC front serves through grpcio")
        return "grpcio"
    if not native_server.AVAILABLE:
        raise ConfigError("--grpc-server native: the native HTTP/2 codec is not built (install "
                          "libnghttp2-dev, then reinstall rocks-timer)")
    return "native"


def parse_listen(text: str) -> tuple[str, int] | None:
    """``--grpc-listen``: ``HOST:PORT`` → (host, port); ``off`` → None."""
    return listen.parse_listen(text, "--grpc-listen")


def _endpoints(host: str, port: int) -> "pb.Endpoints":
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    try:
        scheme = pb.IPv6 if ipaddress.ip_address(host).version == 6 else pb.IPv4
    except ValueError:
        scheme = pb.DOMAIN_NAME
    endpoints = pb.Endpoints(scheme=scheme)
    endpoints.addresses.add(host=host, port=port)
    return endpoints


def _probe(host: str, port: int) -> None:
    """Refuse an address in use before gRPC tries it (gRPC's own refusal also prints a C-level
    error line on stderr). SO_REUSEADDR as gRPC sets it: a listener refuses, TIME_WAIT does not."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ConfigError(f"cannot resolve {host!r}: {exc}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise ConfigError(exc.strerror or str(exc)) from None


def _listener(host: str, port: int) -> socket.socket:
    """The native transport's listening socket (SO_REUSEADDR as grpc sets it, no port reuse)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ConfigError(f"cannot resolve {host!r}: {exc}") from None
    family, kind, proto, _, address = infos[0]
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(1024)
    except OSError as exc:
        listener.close()
        raise ConfigError(exc.strerror or str(exc)) from None
    return listener


class GrpcFront:
    """Serves ``apache.rocketmq.v2.MessagingService`` for ``broker`` on ``host:port``."""

    def __init__(self, broker, host: str, port: int, *, workers: int = 8,
                 transport: str = "auto", loop: str = "auto"):
        self.broker = broker
        self.host = host
        self.port = port
        self.workers = workers
        self.transport = pick_transport(transport)
        self.pop: PopService | None = None
        self.service: MessagingService | None = None
        self.sink = None
        self._serving = listen.LoopThread("grpc-front", "gRPC front", loop)

    @property
    def loop(self) -> str:
        """The event loop that serves: ``uvloop`` or ``asyncio`` (``listen.pick_loop``)."""
        return self._serving.kind

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self) -> "GrpcFront":
        """Bind and serve; returns once the port is bound (``port`` then holds the real one)."""
        self.pop = PopService(self.broker)
        try:
            self._serving.start(self._serve, self.address)
        except ConfigError:
            self.pop.close()
            raise
        return self

    def _message_limit(self) -> int:
        return 2 * self.broker.config.max_message_size + (1 << 20)

    async def _serve(self) -> None:
        if self.transport == "native":
            await self._serve_native()
            return
        limit = self._message_limit()
        server = grpc.aio.server(
            options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", limit),
                     ("grpc.max_connection_idle_ms", IDLE_CONNECTION_MS)],
            maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS)
        with ThreadPoolExecutor(self.workers, thread_name_prefix="grpc-broker") as executor:
            _probe(self.host, self.port)
            try:
                bound = server.add_insecure_port(self.address)
            except RuntimeError as exc:
                raise ConfigError(str(exc)) from None
            if not bound:
                raise ConfigError("the port is in use or the address is not local")
            self.port = bound
            self.sink = metrics_sink.add_to_server(server)
            self.service = MessagingService(self.broker, self.pop, executor,
                                            _endpoints(self.host, bound),
                                            metrics=self.sink is not None)
            service_pb2_grpc.add_MessagingServiceServicer_to_server(self.service, server)
            await server.start()
            self._serving.ready()
            await self._serving.stopping()
            await server.stop(grace=1.0)

    async def _serve_native(self) -> None:
        listener = _listener(self.host, self.port)
        self.port = listener.getsockname()[1]
        with ThreadPoolExecutor(self.workers, thread_name_prefix="grpc-broker") as executor:
            self.sink = metrics_sink.MetricsSink() if metrics_sink.AVAILABLE else None
            self.service = MessagingService(self.broker, self.pop, executor,
                                            _endpoints(self.host, self.port),
                                            metrics=self.sink is not None)
            methods = native_server.methods_of(
                svc.DESCRIPTOR.services_by_name["MessagingService"], self.service)
            if self.sink is not None:
                methods += native_server.methods_of(metrics_sink.service_descriptor(), self.sink)
            server = native_server.NativeServer(
                methods, max_message=self._message_limit(), max_calls=MAX_CONCURRENT_RPCS,
                idle_s=IDLE_CONNECTION_MS / 1000, max_connections=MAX_CONNECTIONS)
            await server.start(listener)
            self._serving.ready()
            await self._serving.stopping()
            await server.stop(grace=1.0)

    def stop(self) -> None:
        """Stop serving (streams in progress get a second to finish) and release the port."""
        self._serving.stop(10)
        if self.pop is not None:
            self.pop.close()

    def stats(self) -> dict:
        figures = self.pop.stats() if self.pop is not None else {}
        if self.service is not None:
            figures["duplicate_sends"] = self.service.recent.duplicates
            figures["per_connection"] = self.service.limits.stats()
        return figures

    def request_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Requests and failed requests per unary RPC since start (for the metrics endpoint)."""
        if self.service is None:
            return {}, {}
        return dict(self.service.requests), dict(self.service.errors)

    def __enter__(self) -> "GrpcFront":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
