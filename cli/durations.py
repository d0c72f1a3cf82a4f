"""Parsing of the CLI's durations (``500ms``, ``30s``, ``5m``, ``2h``, ``7d``, ``1h30m``) and
absolute times (ISO 8601; a time without a zone is UTC), and their display.

``datetime`` lives only here, at the edge; everything past this module is integer milliseconds.
"""
from __future__ import annotations

import datetime as dt
import re

import click

UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PART = re.compile(r"(\d+)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:\d+(?:ms|s|m|h|d))+")
DURATION_HELP = "a duration such as 500ms, 30s, 5m, 2h, 7d or 1h30m"
TIME_HELP = ("an ISO 8601 time such as 2026-12-01T08:00:00Z or 2026-12-01T09:00:00+01:00 "
             "(no zone means UTC), or epoch milliseconds")


class InputError(click.ClickException):
    """A value typed on the command line that cannot be used (one line, exit 1)."""


def parse_duration_ms(text: str, what: str = "duration") -> int:
    """``"1h30m"`` -> 5400000. Units: ms, s, m, h, d; negative or unit-less values are errors."""
    value = text.strip().lower()
    if value.startswith("-"):
        raise InputError(f"{what} {text!r} is negative; give {DURATION_HELP}")
    if not _WHOLE.fullmatch(value):
        raise InputError(f"{what} {text!r} is not {DURATION_HELP}")
    return sum(int(n) * UNIT_MS[unit] for n, unit in _PART.findall(value))


def parse_time_ms(text: str, what: str = "time") -> int:
    """ISO 8601 (naive = UTC) or epoch milliseconds -> epoch milliseconds."""
    value = text.strip()
    if re.fullmatch(r"\d{1,16}", value):
        return int(value)
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise InputError(f"{what} {text!r} is not {TIME_HELP}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)


def parse_bound_ms(text: str | None, now_ms: int, what: str) -> int | None:
    """A scan bound: ``now``, a duration from now (``10m``), or an absolute time."""
    if text is None:
        return None
    value = text.strip().lower()
    if value == "now":
        return now_ms
    if value[:1].isdigit() and _WHOLE.fullmatch(value):
        return now_ms + parse_duration_ms(value, what)
    return parse_time_ms(text, what)


def format_ms(epoch_ms: int | None) -> str:
    """Epoch milliseconds as ``2026-12-01T08:00:00.000Z``."""
    if epoch_ms is None:
        return "-"
    moment = dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def format_duration_ms(ms: int) -> str:
    """Milliseconds as a short duration (``950ms``, ``12.3s``, ``4m05s``, ``2h10m``)."""
    if ms < 1_000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    if ms < 3_600_000:
        return f"{ms // 60_000}m{ms % 60_000 // 1000:02d}s"
    if ms < 86_400_000:
        return f"{ms // 3_600_000}h{ms % 3_600_000 // 60_000:02d}m"
    return f"{ms // 86_400_000}d{ms % 86_400_000 // 3_600_000:02d}h"
