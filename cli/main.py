"""The ``rtimer`` click group: global options, the command list, and the one place where
library errors become one-line ``Error: ...`` messages."""
from __future__ import annotations

import faulthandler
import signal
from pathlib import Path
from typing import Any

import click

from rocks_timer.errors import RocksTimerError

from cli import cmd_broker, cmd_damage, cmd_keys, cmd_messages, demo
from cli.session import ENGINES, Settings


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


for _command in (cmd_messages.send, cmd_messages.scan, cmd_messages.cancel, cmd_messages.consume,
                 cmd_keys.find, cmd_keys.reschedule,
                 cmd_broker.run, cmd_broker.stats, cmd_broker.check, cmd_broker.compact,
                 cmd_broker.repair, cmd_damage.set_aside, cmd_damage.lost,
                 cmd_broker.bench,
                 demo.demo):
    cli.add_command(_command)


def main() -> None:
    _stacks_on_sigusr1()
    cli(prog_name="rtimer", auto_envvar_prefix=None)


def _stacks_on_sigusr1() -> None:
    """``kill -USR1 <pid>`` prints every thread's Python stack to stderr and goes on: a broker
    that does not stop can be asked where it is, as ``jstack`` asks a Java one."""
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)


if __name__ == "__main__":
    main()
