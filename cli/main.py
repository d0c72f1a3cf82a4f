"""The ``rtimer`` click group: global options, the session that reaches a broker, and the one
place where library errors become one-line ``Error: ...`` messages.

A command never opens a store itself: it asks :func:`call` to run one op of :mod:`cli.ops`.
``call`` first tries the socket of a running broker (``rtimer run``); when nobody answers it opens
the data directory directly, runs the op, and closes it.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from rocks_timer import Broker, BrokerConfig
from rocks_timer.errors import RocksTimerError, StoreLockedError

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
        config = BrokerConfig.load(self.config_file) if self.config_file else BrokerConfig()
        engine = self.engine or (None if self.config_file else self.stored_engine())
        return config.replace(timer_engine=engine) if engine else config

    def stored_engine(self) -> str | None:
        """The engine a data dir was created with (so ``--engine`` need not be repeated)."""
        try:
            stored = json.loads((self.data_dir / "config" / "engine.json").read_text())
        except (OSError, ValueError):
            return None
        engine = stored.get("timer_engine") if isinstance(stored, dict) else None
        return engine if engine in ENGINES and engine != "memory" else None

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
                result = ops.OPS[op](broker, settings.data_dir, **args)
            return json.loads(json.dumps(result, default=str))
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


class RtimerGroup(click.Group):
    """Turns every library error into ``Error: <message>`` and exit 1, in one place."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RocksTimerError as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:  # a data dir we cannot read or write: say so, no traceback
            raise click.ClickException(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")
                                       ) from None


@click.group(cls=RtimerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              envvar="RTIMER_DATA_DIR", default="rtimer-data", show_default=True,
              help="Broker data directory (env RTIMER_DATA_DIR).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Broker config: TOML (*.toml) or a RocketMQ broker.conf (key=value).")
@click.option("--engine", type=click.Choice(ENGINES),
              help="Timer engine; overrides the config's timer_engine. Default: the one the "
                   "data dir was created with, else rocksdb.")
@click.version_option(package_name="rocks-timer", prog_name="rtimer")
@click.pass_context
def cli(ctx: click.Context, data_dir: Path, config_file: Path | None, engine: str | None) -> None:
    """rtimer: RocketMQ scheduled messages on a RocksDB timer store.

    While `rtimer run` holds the data dir, the other commands reach it over
    <data-dir>/rtimer.sock; otherwise they open the data dir themselves.

    Example: rtimer send orders "close order 42" --delay 30m
    """
    ctx.obj = Settings(data_dir, config_file, engine)


def _register() -> None:
    from cli import cmd_broker, cmd_messages, demo
    for command in (cmd_messages.send, cmd_messages.scan, cmd_messages.cancel,
                    cmd_messages.consume, cmd_broker.run, cmd_broker.stats, cmd_broker.compact,
                    cmd_broker.bench, demo.demo):
        cli.add_command(command)


_register()


def main() -> None:
    cli(prog_name="rtimer", auto_envvar_prefix=None)


if __name__ == "__main__":
    main()
