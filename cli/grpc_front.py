"""Starting the RocketMQ 5 gRPC front for ``rtimer run --grpc-listen``."""
from __future__ import annotations

import click

from rocks_timer.errors import RocksTimerError

DEFAULT_LISTEN = "127.0.0.1:8081"


def start(broker, listen: str | None, transport: str = "auto", loop: str = "auto"):
    """The started front, or None when disabled. The default address is best effort (a taken
    port or a missing grpc extra is a warning); an address given explicitly must work.
    ``transport``: ``--grpc-server`` (auto, native or grpcio); ``loop``: ``--loop``."""
    explicit = listen is not None
    listen = DEFAULT_LISTEN if listen is None else listen
    if listen.strip().lower() == "off":
        return None
    try:
        from rocks_timer.proxy import GrpcFront, parse_listen
        host, port = parse_listen(listen)  # type: ignore[misc]
        front = GrpcFront(broker, host, port, transport=transport, loop=loop).start()
    except (RocksTimerError, ImportError) as exc:
        if explicit:
            raise
        click.echo(f"rtimer: warning: gRPC front not started: {exc} (give --grpc-listen "
                   "HOST:PORT or off)", err=True)
        return None
    click.echo(f"rtimer: gRPC (RocketMQ 5 proxy protocol) listening on {front.address} "
               f"({front.transport}, {front.loop})")
    return front
