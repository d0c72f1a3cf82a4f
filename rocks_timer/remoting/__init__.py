"""RocketMQ 4.x remoting front (docs/FRONTS.md): ``rtimer run --remoting-listen HOST:PORT``.

A thin room over the Broker's public methods; no engine imports it.
"""
from rocks_timer.remoting.namesrv import parse_namesrv_addrs
from rocks_timer.remoting.server import DEFAULT_LISTEN, RemotingFront, parse_listen

__all__ = ["RemotingFront", "parse_listen", "parse_namesrv_addrs", "DEFAULT_LISTEN"]
