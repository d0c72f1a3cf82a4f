"""Starting the RocketMQ 4.x remoting front for ``rtimer run --remoting-listen``."""
from __future__ import annotations

import click

from rocks_timer.errors import RocksTimerError

DEFAULT_LISTEN = "127.0.0.1:9876"


def start(broker, listen: str | None, namesrv_addr: str | None, broker_name: str | None,
          loop: str = "auto"):
    """The started front, or None when disabled. The default address is best effort (a taken
    port is a warning); an address given explicitly must work. ``loop``: ``--loop``."""
    from rocks_timer.remoting import RemotingFront, parse_listen, parse_namesrv_addrs
    explicit = listen is not None
    listen = DEFAULT_LISTEN if listen is None else listen
    if listen.strip().lower() == "off":
        if namesrv_addr:
            raise click.UsageError("--namesrv-addr needs the remoting front (--remoting-listen "
                                   "is off)")
        return None
    namesrv = parse_namesrv_addrs(namesrv_addr) if namesrv_addr else None
    try:
        host, port = parse_listen(listen)  # type: ignore[misc]
        front = RemotingFront(broker, host, port, broker_name=broker_name,
                              namesrv=namesrv, loop=loop).start()
    except RocksTimerError as exc:
        if explicit or namesrv:
            raise
        click.echo(f"rtimer: warning: remoting front not started: {exc} (give "
                   "--remoting-listen HOST:PORT or off)", err=True)
        return None
    line = (f"rtimer: remoting (RocketMQ 4.x NameServer and broker protocol) listening on "
            f"{front.address} as broker {front.broker_name} ({front.loop})")
    if namesrv:
        line += f"; registering with NameServer {namesrv_addr}"
    click.echo(line)
    return front
