"""How a command reaches a broker: the global settings, and :func:`call`.

A command never opens a store itself: it asks :func:`call` to run one op of :mod:`cli.ops`.
``call`` first tries the socket of a running broker (``rtimer run``); when nobody answers it opens
the data directory directly, runs the op, and closes it.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import click

from rocks_timer import Broker, BrokerConfig, datadir
from rocks_timer.errors import StoreLockedError
from rocks_timer.readonly import ReadOnlyView

from cli import ops
from cli.remote import BrokerClient

ENGINES = ("rocksdb", "wheel", "memory")
LOCK_WAIT_S = 3.0  # a broker that holds the lock may be about to open its socket


@dataclass
class Settings:
    """The global options of one invocation."""

    data_dir: Path
    config_file: Path | None
    engine: str | None

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

    def open_broker(self) -> Broker:
        return Broker.open(self.data_dir, self.config())


def call(settings: Settings, op: str, create: bool = False, **args: Any) -> Any:
    """Run ``op`` on the running broker if one answers, else on the data dir opened here.
    Both paths return the same JSON document."""
    client = BrokerClient.connect(settings.data_dir)
    if client is None:
        if not create:
            settings.require_data_dir()
        try:
            with settings.open_broker() as broker:
                result = ops.run(op, broker, settings.data_dir, args)
            return json.loads(json.dumps(result, default=str))
        except StoreLockedError:
            client = _wait_for_socket(settings.data_dir)
            if client is None:
                raise
    with client:
        return client.call(op, args)


def call_read_only(settings: Settings, op: str, read: Callable[[ReadOnlyView], Any],
                   **args: Any) -> Any:
    """Run ``op`` on the running broker if one answers; else ``read`` on a
    :class:`~rocks_timer.readonly.ReadOnlyView` of the data dir (nothing opened for writing,
    nothing recovered: the files as they are). Both paths return the same JSON document."""
    client = BrokerClient.connect(settings.data_dir)
    if client is None:
        settings.require_data_dir()
        try:
            with ReadOnlyView(settings.data_dir, settings.config()) as view:
                return json.loads(json.dumps(read(view), default=str))
        except StoreLockedError:
            client = _wait_for_socket(settings.data_dir)
            if client is None:
                raise
    with client:
        return client.call(op, args)


def _wait_for_socket(data_dir: Path) -> BrokerClient | None:
    deadline = time.monotonic() + LOCK_WAIT_S
    while time.monotonic() < deadline:
        client = BrokerClient.connect(data_dir)
        if client is not None:
            return client
        time.sleep(0.05)
    return None
