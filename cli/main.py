"""The ``rtimer`` click group: global options, the command list, and the one place where
library errors become one-line ``Error: ...`` messages."""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from rocks_timer.errors import RocksTimerError

from . import cmd_broker, cmd_damage, cmd_keys, cmd_messages, demo
from .session import ENGINES, LOCK_WAIT_S, Settings


class RtimerGroup(click.Group):
    """Turns every library error into ``Error: <message>`` and exit 1, in one place."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # `rtimer scan | head`: the reader has what it wanted
            _quiet_broken_pipe()
        except RocksTimerError as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:  # a data dir we cannot read or write: say so, no traceback
            raise click.ClickException(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")
                                       ) from None


SIGPIPE_EXIT = 128 + 13  # the status of a tool the shell saw end by SIGPIPE (seq, cat, grep)


def _quiet_broken_pipe() -> NoReturn:
    """End like other tools whose reader went away (``| head``): no traceback, no error line,
    status 141. The data dir is already closed (the ``with`` blocks unwound on the way
    here); stdout goes to /dev/null so that Python's final flush of what is still buffered
    does not print an "Exception ignored" line."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (an embedding program): nothing to quiet
        pass
    raise SystemExit(SIGPIPE_EXIT)


@click.group(cls=RtimerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              envvar="RTIMER_DATA_DIR", default="rtimer-data", show_default=True,
              help="Broker data directory (env RTIMER_DATA_DIR).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Broker config: TOML (*.toml) or a RocketMQ broker.conf (key=value).")
@click.option("--engine", type=click.Choice(ENGINES),
              help="Timer engine; overrides the config's timer_engine. Default: the one the "
                   "data dir was created with, else rocksdb.")
@click.option("--lock-wait", "lock_wait_s", type=click.FloatRange(0, 3600), envvar="RTIMER_LOCK_WAIT",
              default=LOCK_WAIT_S, show_default=True, metavar="SECONDS",
              help="How long to wait for a data dir another rtimer process holds without a "
                   "socket (another command; env RTIMER_LOCK_WAIT).")
@click.version_option(package_name="rocks-timer", prog_name="rtimer")
@click.pass_context
def cli(ctx: click.Context, data_dir: Path, config_file: Path | None, engine: str | None,
        lock_wait_s: float) -> None:
    """rtimer: RocketMQ scheduled messages on a RocksDB timer store.

    While `rtimer run` holds the data dir, the other commands reach it over
    <data-dir>/rtimer.sock; otherwise they open the data dir themselves.

    Example: rtimer send orders "close order 42" --delay 30m
    """
    ctx.obj = Settings(data_dir, config_file, engine, lock_wait_s)


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
