"""The HTTP front of ``rtimer run --metrics-listen``: ``/metrics`` (Prometheus text) and, with
``--dashboard``, the dashboard page (``/``, its static files) and the JSON it polls
(``/api/dashboard``).

A thin room: every answer is built from the Broker's public figures at request time
(:mod:`rocks_timer.metrics.collector`, :func:`dashboard_document`). Bounded as every other
front (ARCHITECTURE §4): GET and HEAD only (anything else is answered 501 by ``http.server``), its
limits on a request (a 64 KiB request line, 100 headers; a body is never read), at most
``MAX_CONNECTIONS`` served at once (the others are answered 503), a read timeout per request.
The static files ship inside the package; nothing is fetched from the network.
"""
from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from rocks_timer.errors import ConfigError
from rocks_timer.metrics.collector import COMPONENTS, BrokerCollector, store_problems

log = logging.getLogger(__name__)
MAX_CONNECTIONS = 16
REQUEST_TIMEOUT_S = 10.0
WRITE_BUFFER = 256 * 1024  # holds a /metrics answer of a broker with a few hundred topics
STATIC = {"/": ("dashboard.html", "text/html; charset=utf-8"),
          "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
          "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8")}


def dashboard_document(broker, fronts: dict[str, Callable] | None = None,
                       popped: Callable[[], int] | None = None) -> dict[str, Any]:
    """What the dashboard polls: one ``stats()`` reading, reshaped for drawing."""
    stats = broker.stats()
    timer, log_stats = stats["timer"], stats["commitlog"]
    consumed = log_stats.get("messages_read", 0) + (popped() if popped is not None else 0)
    problems = store_problems(stats)
    requests = {}
    for name, counts in sorted((fronts or {}).items()):
        done, failed = counts()
        requests[name] = {"requests": sum(done.values()), "errors": sum(failed.values())}
    bytes_written = {COMPONENTS.get(k, k): v for k, v in timer.get("bytes_written", {}).items()}
    bytes_written["commitlog"] = log_stats["commitlog_bytes"]
    bytes_written["consumequeue"] = log_stats["consumequeue_bytes"]
    return {
        "engine": stats["engine"], "layout": timer.get("layout"), "now_ms": stats["now_ms"],
        "pending": stats["pending"], "in_flight": stats["in_flight"], "lag_ms": stats["lag_ms"],
        "sent": stats["sent"], "sent_total": sum(stats["sent"].values()),
        "delivered": stats["delivered"], "cancelled": stats["cancelled"],
        "rescheduled": stats["rescheduled"], "consumed": consumed,
        "due": stats["due"] or {"buckets": {}, "days": []},
        "lateness_ms": stats["deliveries"]["lateness_ms"],
        "failures": (stats.get("health") or {}).get("failures", []),
        "early": stats["deliveries"]["early"], "bytes_written": bytes_written,
        "live_fraction": timer.get("vlog_live_fraction"),
        "set_aside": int(timer.get("corrupt", 0)), "problems": problems,
        "healthy": not any(problems.values()), "open": stats["open"], "fronts": requests,
    }


class _Handler(BaseHTTPRequestHandler):
    server: "MetricsServer"
    protocol_version = "HTTP/1.1"
    timeout = REQUEST_TIMEOUT_S  # a client that sends nothing is dropped
    # headers and body leave in one send (flushed at the end of each request): unbuffered, they
    # were two, and each send on a socket with a timeout is two calls that release the GIL,
    # which the broker's sending threads feel (docs/DECISIONS.md, "Disk figures at most every
    # 30 s"); a larger answer is still sent whole, in more than one
    wbufsize = WRITE_BUFFER

    def log_message(self, fmt: str, *args: Any) -> None:  # access logs would flood the log
        log.debug("metrics http: " + fmt, *args)

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(head=True)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(head=False)

    def _answer(self, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        try:
            status, kind, body = self.server.render(path)
        except Exception as exc:  # noqa: BLE001 - the server answers, it does not die
            log.exception("metrics http: %s failed", path)
            status, kind, body = 500, "text/plain; charset=utf-8", f"error: {exc}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if not head:
            self.wfile.write(body)


class MetricsServer(ThreadingHTTPServer):
    """Serves one broker's metrics (and dashboard) on ``host:port`` (0: a free port)."""

    daemon_threads = True

    def __init__(self, broker, host: str, port: int, *, dashboard: bool = False,
                 labels: dict[str, str] | None = None,
                 fronts: dict[str, Callable] | None = None,
                 popped: Callable[[], int] | None = None):
        self.broker = broker
        self.dashboard = dashboard
        self.fronts = fronts if fronts is not None else {}
        self.popped = popped
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = BrokerCollector(broker, labels or {}, self.fronts, popped)
        self.registry.register(self.collector)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._thread: threading.Thread | None = None
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            super().__init__((host, port), _Handler)
        except OSError as exc:
            raise ConfigError(f"metrics cannot listen on {host}:{port}: "
                              f"{exc.strerror or exc}") from None

    @property
    def address(self) -> str:
        host, port = self.server_address[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                b"Connection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def render(self, path: str) -> tuple[int, str, bytes]:
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if self.dashboard and path == "/api/dashboard":
            doc = dashboard_document(self.broker, self.fronts, self.popped)
            return 200, "application/json", json.dumps(doc).encode()
        if self.dashboard and path in STATIC:
            name, kind = STATIC[path]
            return 200, kind, resources.files("rocks_timer.metrics").joinpath(
                "static", name).read_bytes()
        return 404, "text/plain; charset=utf-8", b"not found: /metrics" + \
            (b", / (dashboard), /api/dashboard" if self.dashboard else b"") + b"\n"

    def start(self) -> "MetricsServer":
        self._thread = threading.Thread(target=self.serve_forever, name="metrics-http",
                                        kwargs={"poll_interval": 0.2}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()
