"""The listen addresses of the network fronts (``--grpc-listen``, ``--remoting-listen``,
``--metrics-listen``): one reading of ``HOST:PORT`` for all of them."""
from __future__ import annotations

from rocks_timer.errors import ConfigError


def parse_listen(text: str, option: str, allow_off: bool = True) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) → (host, port), port 0 meaning any free port;
    ``off`` → None where ``allow_off``. Anything else is a ConfigError naming ``option``."""
    text = (text or "").strip()
    if allow_off and text.lower() == "off":
        return None
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{option} {text!r} must be HOST:PORT (port 0..65535, 0 = any free "
                          f"port){' or ' + repr('off') if allow_off else ''}")
    return host, int(port)
