"""The damage commands: ``set-aside`` (list, export, restore quarantined timer messages) and
``lost`` (list and accept CommitLog loss). Thin: each is one Broker method (``cli.ops``), and
the read-only ones run on a ``ReadOnlyView`` when no broker runs (``call_read_only``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from . import render
from .session import Settings, call, call_read_only


@click.group("set-aside")
def set_aside() -> None:
    """Timer messages set aside because they could not be read: list, export, restore.

    A pending message whose stored value does not decode (or whose value-segment record is
    damaged or missing) is set aside when due: never delivered, never dropped. These
    commands show them by message, save what is readable, and put them back once the cause
    is fixed. `rtimer check` fails while any exist.

    Example: rtimer set-aside list
    """


@set_aside.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def set_aside_list(settings: Settings, as_json: bool) -> None:
    """List set-aside messages: msg_id, topic, keys, due time and reason (read-only).

    Keys are "unknown" when the value does not decode; "restorable" means it decodes now.

    Example: rtimer set-aside list --json
    """
    rows = call_read_only(settings, "set_aside_list",
                          lambda view: [row.info.as_dict() for row in view.set_aside()])
    render.echo_json(rows) if as_json else render.set_aside(rows)


@set_aside.command("export")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--msg-id", "msg_ids", multiple=True,
              help="Export only this message (repeatable); default: every one.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def set_aside_export(settings: Settings, directory: Path, msg_ids: tuple[str, ...],
                     as_json: bool) -> None:
    """Save what is readable of set-aside messages into DIRECTORY (new or empty).

    One file per message and part, as raw bytes: NNNNNN.index (the stored index value),
    NNNNNN.record (the value-segment bytes it points at, as on disk) and NNNNNN.body (when
    it decodes), and manifest.json naming each (msg_id, topic, keys, due time, reason,
    properties). The data dir is not changed.

    Example: rtimer set-aside export ./set-aside-2026-11-26
    """
    target = directory.resolve()
    ids = list(msg_ids) or None
    result = call_read_only(settings, "set_aside_export",
                            lambda view: view.export_set_aside(target, ids),
                            directory=str(target), msg_ids=ids)
    if as_json:
        render.echo_json(result)
    else:
        click.echo(f"exported {result['exported']} set-aside message(s) to "
                   f"{result['directory']} ({result['with_body']} with a readable body)")


@set_aside.command("restore")
@click.argument("msg_ids", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def set_aside_restore(settings: Settings, msg_ids: tuple[str, ...], as_json: bool) -> None:
    """Put set-aside messages back (all, or the MSG_IDS given) once they decode again.

    Each one that decodes now is scheduled again with its due time (delivered at once if
    that has passed); each one that still does not is refused with its reason and stays set
    aside. Exit status 1 if any was refused.

    Example: rtimer set-aside restore 7F0000011F9A18B4AAC2745E1E9B0000
    """
    settings.require_data_dir()
    result = call(settings, "set_aside_restore", msg_ids=list(msg_ids) or None)
    if as_json:
        render.echo_json(result)
    else:
        for row in result["restored"]:
            click.echo(f"restored {row['msg_id']} ({row['topic']}, due_ms {row['due_ms']})")
        for row in result["refused"]:
            click.echo(f"refused {row['msg_id']} ({row['topic']}): {row['reason']}")
        click.echo(f"{len(result['restored'])} restored, {len(result['refused'])} refused")
    if result["refused"]:
        raise SystemExit(1)


@click.group()
def lost() -> None:
    """Acknowledged messages lost with CommitLog files: list them, accept the loss.

    When a CommitLog file is found missing or cut below records that queues point at, the
    next open records the loss (in config/commitlogLoss.json) before repairing the queues;
    `rtimer check` fails on it until an operator accepts it.

    Example: rtimer lost list
    """


@lost.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def lost_list(settings: Settings, as_json: bool) -> None:
    """List the lost CommitLog ranges and the messages their queues named (read-only).

    Each message: topic, queue, queue offset, CommitLog offset and size (msg_id when known).
    Exit status 1 while any loss is not accepted.

    Example: rtimer lost list --json
    """
    record = call_read_only(settings, "lost_list", lambda view: view.loss().as_dict())
    render.echo_json(record) if as_json else render.lost(record)
    if record["unaccepted"] or record["unaccepted_ranges"]:
        raise SystemExit(1)


@lost.command("accept")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def lost_accept(settings: Settings, as_json: bool) -> None:
    """Record that you have seen every loss listed: check stops failing on it.

    The record stays (rtimer lost list still shows it); a later loss fails check again.

    Example: rtimer lost accept
    """
    settings.require_data_dir()
    record: dict[str, Any] = call(settings, "lost_accept")
    if as_json:
        render.echo_json(record)
    else:
        click.echo(f"accepted {record['lost_messages']} lost message(s) in "
                   f"{len(record['ranges'])} range(s)")
