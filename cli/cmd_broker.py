"""The broker commands: ``run``, ``stats``, ``check``, ``compact``, ``repair`` and ``bench``."""
from __future__ import annotations

import importlib
import os
import signal
import threading
from typing import Any

import click

from rocks_timer.errors import ConfigError
from rocks_timer.listen import pick_loop

from . import grpc_front, metrics_front, remoting_front, render
from .durations import InputError, format_ms, parse_time_ms
from .session import Settings, call, call_read_only
from .remote import BrokerSocketServer, socket_path


@click.command()
@click.option("--grpc-listen", metavar="HOST:PORT|off", default=None,
              help="Serve the RocketMQ 5 gRPC protocol (the official clients) here; port 0 "
                   "picks a free port; 'off' disables it. Default 127.0.0.1:8081 (skipped "
                   "with a warning if that port is taken).")
@click.option("--grpc-server", type=click.Choice(["auto", "native", "grpcio"]), default="auto",
              show_default=True,
              help="The gRPC front's transport: native (HTTP/2 by libnghttp2, on the front's "
                   "event loop), grpcio (grpc.aio), or auto (native when it is built, else "
                   "grpcio with a warning).")
@click.option("--loop", "loop", type=click.Choice(["auto", "uvloop", "asyncio"]), default="auto",
              show_default=True,
              help="The event loop the gRPC and remoting fronts run on: uvloop (libuv's, the "
                   "'fast' extra), asyncio (the standard library's), or auto (uvloop when it "
                   "is installed, else asyncio).")
@click.option("--remoting-listen", metavar="HOST:PORT|off", default=None,
              help="Serve RocketMQ's 4.x remoting protocol (NameServer and broker on one "
                   "port: set a 4.x client's namesrvAddr to it); port 0 picks a free port; "
                   "'off' disables it. Default 127.0.0.1:9876 (skipped with a warning if "
                   "that port is taken).")
@click.option("--namesrv-addr", metavar="HOST:PORT[;HOST:PORT]", default=None,
              help="Register this broker with these RocketMQ NameServers (every 30 s, and "
                   "unregister on stop), so several brokers serve one topic.")
@click.option("--broker-name", default=None,
              help="The broker name routes and NameServers show (default rtimer-<port>); "
                   "give each broker behind one NameServer its own.")
@click.option("--metrics-listen", metavar="HOST:PORT", default=None,
              help="Serve /metrics (Prometheus text, RocketMQ 5's metric names) here; port 0 "
                   "picks a free port. Default off; 127.0.0.1:5557 is RocketMQ's convention.")
@click.option("--dashboard", is_flag=True,
              help="Also serve a live dashboard page at / on the --metrics-listen port.")
@click.option("--metrics-label", "metrics_labels", metavar="NAME=VALUE", multiple=True,
              help="A label on every metric (repeatable), e.g. cluster=prod or node_id=b1 "
                   "(defaults: cluster=DefaultCluster, node_type=broker, node_id=<hostname>).")
@click.pass_obj
def run(settings: Settings, grpc_listen: str | None, grpc_server: str, loop: str,
        remoting_listen: str | None,
        namesrv_addr: str | None, broker_name: str | None, metrics_listen: str | None,
        dashboard: bool, metrics_labels: tuple[str, ...]) -> None:
    """Run the broker in the foreground until SIGTERM or Ctrl-C.

    Delivers timer and level messages as they come due, answers the other rtimer
    commands over <data-dir>/rtimer.sock (mode 0600, removed on stop), serves
    RocketMQ 5 clients over gRPC (--grpc-listen), RocketMQ 4.x clients over remoting
    (--remoting-listen), and metrics and a dashboard over HTTP (--metrics-listen,
    --dashboard). When delivery keeps failing (a damaged store, a full disk) it backs
    off, logs one line per failure kind per minute and shows it in `rtimer stats`;
    stopped while delivery was failing, it exits 1.

    Example: rtimer --data-dir ./data run --grpc-listen 127.0.0.1:8081

    Example: rtimer --data-dir ./b1 run --remoting-listen 127.0.0.1:10911 --namesrv-addr 127.0.0.1:9876 --broker-name b1

    Example: rtimer run --metrics-listen 127.0.0.1:5557 --dashboard
    """
    metrics_plan = metrics_front.plan(metrics_listen, dashboard, metrics_labels)
    try:
        pick_loop(loop)  # uvloop asked for and not installed: refused before anything starts
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--loop") from None
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with settings.open_broker() as broker:
            with BrokerSocketServer(broker, settings.data_dir) as sock_server:
                broker.start()
                click.echo(f"rtimer: broker running on {settings.data_dir} (engine "
                           f"{broker.engine}, pid {os.getpid()}); socket "
                           f"{socket_path(settings.data_dir)}; Ctrl-C or SIGTERM stops it")
                front = metrics = remoting = None
                try:
                    front = grpc_front.start(broker, grpc_listen, grpc_server, loop)
                    remoting = remoting_front.start(broker, remoting_listen, namesrv_addr,
                                                    broker_name, loop)
                    fronts = {"socket": sock_server.request_counts}
                    if front is not None:
                        fronts["grpc"] = front.request_counts
                    if remoting is not None:
                        fronts["remoting"] = remoting.request_counts
                    metrics = metrics_front.start(
                        broker, metrics_plan, dashboard, fronts,
                        popped=(lambda: front.pop.popped) if front is not None else None)
                    while not stop.wait(0.5):
                        pass
                    click.echo("rtimer: stopping")
                finally:
                    if metrics is not None:
                        metrics.stop()
                    if remoting is not None:
                        remoting.stop()
                    if front is not None:
                        front.stop()
            stats = broker.stats()
            failing = broker.health.failing(delivery_only=True)
        if failing:  # a supervisor must see that due messages were left undelivered
            for failure in failing:
                click.echo(render.printable(
                    f"rtimer: stopped while delivery was failing: {failure['kind']}, "
                    f"{failure['count']} time(s) in a row since "
                    f"{format_ms(failure['since_ms'])}: {failure['last_error']}"), err=True)
            click.echo(f"rtimer: stopped ({stats['pending']} pending, {stats['delivered']} "
                       "timer messages delivered this run); delivery FAILED, see above")
            raise SystemExit(1)
        click.echo(f"rtimer: stopped cleanly ({stats['pending']} pending, "
                   f"{stats['delivered']} timer messages delivered this run)")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@click.command()
@click.option("--due", "due", is_flag=True,
              help="Show pending counts by due time instead: next minute / hour / day / "
                   "week / later, and per UTC day.")
@click.option("--days", type=int, default=7, show_default=True,
              help="With --due: how many days to list.")
@click.option("--from-day", help="With --due: the first day to list (YYYY-MM-DD, UTC; "
                                 "default today).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def stats(settings: Settings, due: bool, days: int, from_day: str | None, as_json: bool) -> None:
    """Show pending messages per topic, deliveries, lag and the timer engine's figures.

    Sent/delivered/cancelled counters belong to the broker process that answers (the
    running broker, or this command's own short-lived one). With --due: how many pending
    timer messages fall due when, from counters the engine keeps (exact for RocksDB, the
    wheel's slot counts for the wheel), never a scan.

    Example: rtimer stats --json

    Example: rtimer stats --due --days 3
    """
    if not due:
        if from_day is not None:
            raise InputError("--from-day goes with --due")
        figures = call(settings, "stats")
        render.echo_json(figures) if as_json else render.stats(figures)
        return
    if not 0 <= days <= 400:
        raise InputError(f"--days {days} is invalid; allowed: 0..400")
    first = parse_time_ms(from_day + "T00:00:00Z", "--from-day") if from_day else None
    document = call(settings, "due", first_day_ms=first, days=days)
    render.echo_json(document) if as_json else render.due(document)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def check(settings: Settings, as_json: bool) -> None:
    """Walk the data dir's invariants read-only and print what is wrong, if anything.

    Every CommitLog record passes its CRC and is indexed by its ConsumeQueue, every queue
    entry points at a matching record, the timer store's pending count equals its keys (and,
    in the vlog layout, segment live counts match the index), every offset lies within its
    queue, no acknowledged message is lost (CommitLog ranges gone under queue entries, named
    by topic, queue and offset) and none is set aside (named by msg_id, topic, keys and due
    time). Without a running broker it opens every file read-only and changes nothing (a torn
    tail is reported, not cut); with one it asks that broker. Exit status 0 when all hold, 1
    when one does not (or the data dir cannot be opened).

    Example: rtimer check
    """
    from rocks_timer.check import check_view
    settings.require_data_dir()
    report = call_read_only(settings, "check", lambda view: check_view(view).as_dict())
    if as_json:
        render.echo_json(report)
    else:
        render.check(report)
    if not report["ok"]:
        raise SystemExit(1)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def compact(settings: Settings, as_json: bool) -> None:
    """Compact the timer store by hand and show its size before and after.

    The RocksDB engine runs a full manual compaction of its timer column family; the other
    engines have nothing to compact and say so.

    Example: rtimer compact
    """
    result = call(settings, "compact")
    render.echo_json(result) if as_json else render.compacted(result)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--rebuild", is_flag=True,
              help="Rebuild even a store that opens and passes its check (vlog: the index "
                   "from the value segments).")
@click.pass_obj
def repair(settings: Settings, as_json: bool, rebuild: bool) -> None:
    """Repair a damaged RocksDB timer store, crash-safely, and name what is lost.

    A store that opens and passes its check is left alone. Otherwise the repaired store is built
    beside the old one (<data-dir>/timer-rocksdb.rebuild) and switched in by renames; the old
    one is kept as timer-rocksdb.before-repair-<n> (delete it once satisfied). In the vlog
    layout the index is rebuilt from the value segments (their removal records say what was
    delivered, cancelled or rescheduled); in the inline layout what RocksDB can salvage is kept
    and every message that could not be recovered is named (msg id, topic, keys, due time).
    A repair killed at any point is finished by the next `rtimer repair`. A full disk or a
    permission error is reported as such and changes nothing. Stop the broker first. Exit
    status 1 if anything acknowledged is lost or the repaired store's check finds a problem.

    Example: rtimer repair
    """
    from rocks_timer.repair import repair_timer_store
    settings.require_data_dir()
    with settings.data_dir_lock():
        report = repair_timer_store(settings.data_dir, settings.config(), rebuild=rebuild)
    result = report.as_dict()
    if as_json:
        render.echo_json(result)
    else:
        render.repaired(result)
    if not result["ok"]:
        raise SystemExit(1)


@click.group()
def bench() -> None:
    """Benchmarks: write amplification across engines, and compaction tuning.

    Example: rtimer bench wa --help
    """


def _forward(module_name: str, argv: tuple[str, ...]) -> None:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        # bench/ and spark/ are tools of the checkout, not installed by `pip install rocks-timer`
        raise click.ClickException(
            f"{module_name} is not available in this install ({exc}): `rtimer bench` runs the "
            "repository's benchmark tools, so run it from a rocks-timer checkout set up with "
            "`make venv` (which installs the `spark` extra: pyspark, pandas, pyarrow, matplotlib)"
        ) from None
    entry: Any = getattr(module, "main", None)
    if entry is None:
        raise click.ClickException(f"{module_name} has no main(argv)")
    # the Spark jobs import pyspark and the dataframe stack only when they run: say which extra
    # is missing before they start rather than fail inside a job (--help needs none of it)
    missing = [] if {"-h", "--help"} & set(argv) else _missing(SPARK_EXTRA)
    if missing:
        raise click.ClickException(
            f"{module_name} needs the `spark` extra, which this install lacks "
            f"({', '.join(missing)} not importable): in the rocks-timer checkout run `make venv`, "
            "or `pip install -e '.[spark]'`")
    raise SystemExit(entry(list(argv)) or 0)


SPARK_EXTRA = ("pyspark", "pandas", "pyarrow", "matplotlib")  # pyproject.toml's `spark` extra


def _missing(modules: tuple[str, ...]) -> list[str]:
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


_FORWARD = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


@bench.command(context_settings=_FORWARD)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def wa(args: tuple[str, ...]) -> None:
    """Compare write amplification across engines (runs spark.wa_compare; --help for its options).

    Example: rtimer bench wa --help
    """
    _forward("spark.wa_compare", args)


@bench.command(context_settings=_FORWARD)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def tune(args: tuple[str, ...]) -> None:
    """Sweep RocksDB compaction profiles (runs spark.tune_compaction; --help for its options).

    Example: rtimer bench tune --help
    """
    _forward("spark.tune_compaction", args)
