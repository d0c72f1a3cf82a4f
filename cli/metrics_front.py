"""Starting the metrics endpoint and dashboard for ``rtimer run --metrics-listen``."""
from __future__ import annotations

import click

from rocks_timer import listen
from rocks_timer.errors import ConfigError


def parse_address(text: str, option: str = "--metrics-listen") -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``) → (host, port); port 0 picks a free one."""
    return listen.parse_listen(text, option, allow_off=False)


def parse_labels(items: tuple[str, ...]) -> dict[str, str]:
    """``--metrics-label KEY=VALUE`` (RocketMQ's metricsLabel) → a dict; names as Prometheus
    allows them."""
    labels = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not (key[0].isalpha() or key[0] == "_") or \
                not all(c.isalnum() or c == "_" for c in key) or not key.isascii():
            raise ConfigError(f"--metrics-label {item!r} must be NAME=VALUE (NAME: letters, "
                              "digits and _, not starting with a digit)")
        labels[key] = value
    return labels


def plan(listen: str | None, dashboard: bool, labels: tuple[str, ...]
         ) -> tuple[str, int, dict[str, str]] | None:
    """The checked options (host, port, extra labels), or None when metrics are off; checked
    before the broker opens, so a bad option stores nothing and starts nothing."""
    if listen is None:
        if dashboard:
            raise ConfigError("--dashboard is served on the metrics port: give --metrics-listen "
                              "HOST:PORT too")
        if labels:
            raise ConfigError("--metrics-label goes with --metrics-listen")
        return None
    host, port = parse_address(listen)
    return host, port, parse_labels(labels)


def start(broker, planned: tuple[str, int, dict[str, str]] | None, dashboard: bool,
          fronts: dict, popped=None):
    """The started metrics server, or None when metrics are off."""
    if planned is None:
        return None
    host, port, labels = planned
    try:
        from rocks_timer.metrics import MetricsServer, default_labels
    except ImportError as exc:
        raise ConfigError(f"--metrics-listen needs prometheus-client: {exc}") from None
    server = MetricsServer(broker, host, port, dashboard=dashboard,
                           labels=default_labels(labels), fronts=fronts, popped=popped).start()
    click.echo(f"rtimer: metrics on http://{server.address}/metrics")
    if dashboard:
        click.echo(f"rtimer: dashboard on http://{server.address}/")
    return server
