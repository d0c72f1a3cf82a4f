"""The listen addresses of the network fronts (``--grpc-listen``, ``--remoting-listen``,
``--metrics-listen``): one reading of ``HOST:PORT`` for all of them; the thread an asyncio
front (gRPC, remoting) serves on, and the event loop it runs (``rtimer run --loop``).

The loop: ``uvloop`` (libuv's loop, the ``fast`` extra) when it is installed, else asyncio's
own; both run the same fronts unchanged. uvloop does a request's turn of the loop (the poll,
the read, the callbacks, the write) in C where asyncio does it in Python: the remoting front
spent measurably less CPU per one-at-a-time send on it (docs/DECISIONS.md "The remoting send
on a native path"). ``auto`` is the default: uvloop where it is installed, asyncio otherwise."""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Awaitable, Callable

from rocks_timer.errors import ConfigError

log = logging.getLogger(__name__)
START_TIMEOUT_S = 30.0


def parse_listen(text: str, option: str, allow_off: bool = True) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) → (host, port), port 0 meaning any free port;
    ``off`` → None where ``allow_off``. Anything else is a ConfigError naming ``option``."""
    text = (text or "").strip()
    if allow_off and text.lower() == "off":
        return None
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{option} {text!r} must be HOST:PORT (port 0..65535, 0 = any free "
                          f"port){' or ' + repr('off') if allow_off else ''}")
    return host, int(port)


LOOPS = ("auto", "uvloop", "asyncio")


def pick_loop(choice: str) -> str:
    """``--loop`` (auto, uvloop or asyncio) -> the loop that will run: ``uvloop`` or
    ``asyncio``. ``uvloop`` asked for but not installed is a ConfigError; ``auto`` takes
    uvloop when it is installed."""
    if choice not in LOOPS:
        raise ConfigError(f"--loop {choice!r} must be one of {', '.join(LOOPS)}")
    if choice == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401 - only whether it imports
        installed = True
    except ImportError:
        installed = False
    if choice == "uvloop" and not installed:
        raise ConfigError("--loop uvloop: uvloop is not installed (pip install "
                          "'rocks-timer[fast]'), use --loop asyncio or auto")
    return "uvloop" if installed else "asyncio"


def new_loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes a new loop of ``kind`` (``pick_loop``'s answer)."""
    if kind == "uvloop":
        import uvloop
        return uvloop.new_event_loop
    return asyncio.new_event_loop


class LoopThread:
    """An asyncio front's event loop on a daemon thread of its own. :meth:`start` returns once
    the serve coroutine has called :meth:`ready` (bound and serving), or raises ConfigError
    saying why it could not start; the coroutine waits in :meth:`stopping` until :meth:`stop`.
    ``loop``: ``auto``, ``uvloop`` or ``asyncio`` (``pick_loop``); ``kind`` says which runs."""

    def __init__(self, name: str, what: str, loop: str = "auto") -> None:
        self.name, self.what = name, what  # the thread's name; the front, in messages
        self.kind = pick_loop(loop)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    def start(self, serve: Callable[[], Awaitable[None]], address: str) -> None:
        self._thread = threading.Thread(target=self._run, args=(serve,), name=self.name,
                                        daemon=True)
        self._thread.start()
        if not self._started.wait(START_TIMEOUT_S):
            raise ConfigError(f"{self.what} did not start on {address} in time")
        if self._error is not None:
            raise ConfigError(f"{self.what} cannot listen on {address}: {self._error}")

    def _run(self, serve: Callable[[], Awaitable[None]]) -> None:
        try:
            with asyncio.Runner(loop_factory=new_loop_factory(self.kind)) as runner:
                runner.run(self._main(serve))
        except BaseException as exc:  # noqa: BLE001 - reported to start() or logged
            if not self._started.is_set():
                self._error = exc
                self._started.set()
            else:
                log.exception("%s stopped with an error", self.what)

    async def _main(self, serve: Callable[[], Awaitable[None]]) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await serve()

    def ready(self) -> None:
        """Called by the serve coroutine once it listens: :meth:`start` returns."""
        self._started.set()

    async def stopping(self) -> None:
        """Returns in the serve coroutine when :meth:`stop` is called."""
        assert self._stop is not None
        await self._stop.wait()

    def stop(self, join_s: float) -> None:
        """Ask the serve coroutine to end and wait up to ``join_s`` for the thread."""
        if self.loop is not None and self._stop is not None and self._thread is not None:
            try:
                self.loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:
                pass  # the loop already ended
            self._thread.join(join_s)
