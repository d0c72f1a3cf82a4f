"""How a command reaches a broker: the global settings, and :func:`call`.

A command never opens a store itself: it asks :func:`call` to run one op of :mod:`cli.ops`.
``call`` first tries the socket of a running broker (``rtimer run``); when nobody answers it opens
the data directory directly, runs the op, and closes it.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import click

from rocks_timer import Broker, BrokerConfig, datadir
from rocks_timer.errors import StoreLockedError
from rocks_timer.private import hold_owner_only_umask, release_owner_only_umask
from rocks_timer.readonly import ReadOnlyView

from . import ops
from .remote import BrokerClient

ENGINES = ("rocksdb", "wheel", "memory")
# How long a command waits for a data dir another process holds: another short command (a
# `send` takes well under a second) finishes, or a starting `rtimer run` opens its socket
LOCK_WAIT_S = 5.0
LOCK_POLL_S = 0.05


@dataclass
class Settings:
    """The global options of one invocation."""

    data_dir: Path
    config_file: Path | None
    engine: str | None
    lock_wait_s: float = LOCK_WAIT_S

    def config(self) -> BrokerConfig:
        """The ``--config`` file and ``--engine``; every format setting they leave unsaid
        (the engine included) is the one the data dir was created with."""
        values = BrokerConfig.read_values(self.config_file) if self.config_file else {}
        if self.engine:
            values["timer_engine"] = self.engine
        return datadir.adopt(self.data_dir, BrokerConfig.from_mapping(values), values)

    def require_data_dir(self) -> None:
        """Read commands never create a data dir."""
        if not self.data_dir.is_dir():
            raise click.ClickException(f"data dir {self.data_dir} does not exist (give "
                                       "--data-dir or RTIMER_DATA_DIR, or send something first)")
        if not (self.data_dir / "broker.lock").exists():
            raise click.ClickException(f"{self.data_dir} is not an rtimer data dir (no broker.lock)")

    @contextlib.contextmanager
    def data_dir_lock(self) -> Iterator[None]:
        """Hold the data dir's lock (a broker or another command holding it: StoreLockedError),
        for commands that work on the files without opening a broker (``repair``)."""
        fd = os.open(self.data_dir / "broker.lock", os.O_RDWR)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreLockedError(f"data dir {self.data_dir} is in use (a broker or another "
                                       f"command holds broker.lock); stop it first") from None
            hold_owner_only_umask()
            try:
                yield
            finally:
                release_owner_only_umask()
        finally:
            os.close(fd)

    def open_broker(self) -> Broker:
        """The data dir opened here, waiting up to ``lock_wait_s`` while another process
        holds it without serving it (a running broker is not waited for)."""
        deadline = time.monotonic() + self.lock_wait_s
        while True:
            try:
                return Broker.open(self.data_dir, self.config())
            except StoreLockedError as exc:
                client = BrokerClient.connect(self.data_dir)
                if client is not None:  # a broker runs there: it will not go away by itself
                    client.close()
                    raise
                self.wait_for_lock(exc, deadline)

    def wait_for_lock(self, exc: StoreLockedError, deadline: float) -> None:
        """Sleep a moment before the next try, or raise ``exc`` (saying how long we waited)
        once ``deadline`` has passed."""
        if time.monotonic() >= deadline:
            raise StoreLockedError(f"{exc} (waited {self.lock_wait_s:g} s; --lock-wait "
                                   "sets how long)") from None
        time.sleep(LOCK_POLL_S)


def call(settings: Settings, op: str, create: bool = False, **args: Any) -> Any:
    """Run ``op`` on the running broker if one answers, else on the data dir opened here.
    Both paths return the same JSON document. While another process holds the data dir
    without a socket (another command, or a broker still starting), it tries both again
    until ``settings.lock_wait_s`` has passed."""
    deadline = time.monotonic() + settings.lock_wait_s
    while True:
        client = BrokerClient.connect(settings.data_dir)
        if client is not None:
            with client:
                return client.call(op, args)
        if not create:
            settings.require_data_dir()
        try:
            broker = Broker.open(settings.data_dir, settings.config())
        except StoreLockedError as exc:
            settings.wait_for_lock(exc, deadline)
            continue
        with broker:
            result = ops.run(op, broker, settings.data_dir, args)
        return json.loads(json.dumps(result, default=str))


def call_read_only(settings: Settings, op: str, read: Callable[[ReadOnlyView], Any],
                   **args: Any) -> Any:
    """Run ``op`` on the running broker if one answers; else ``read`` on a
    :class:`~rocks_timer.readonly.ReadOnlyView` of the data dir (nothing opened for writing,
    nothing recovered: the files as they are). Both paths return the same JSON document;
    while another process holds the data dir without a socket it tries both again, as
    :func:`call` does."""
    deadline = time.monotonic() + settings.lock_wait_s
    while True:
        client = BrokerClient.connect(settings.data_dir)
        if client is not None:
            with client:
                return client.call(op, args)
        settings.require_data_dir()
        try:
            view = ReadOnlyView(settings.data_dir, settings.config())
        except StoreLockedError as exc:
            settings.wait_for_lock(exc, deadline)
            continue
        with view:
            return json.loads(json.dumps(read(view), default=str))
