"""Whether a host or address stays on this machine: one rule for every listener and client.

Three decisions hang on it: a listener may bind a non-loopback host only with TLS and
authentication (server settings), the HTTP API accepts only loopback ``Host`` headers
besides its allow-list (DNS rebinding), and a client sends a bearer token in plaintext
only to a loopback address. A host *name* other than ``localhost`` counts as not
loopback: it may resolve to anything, and a check that resolved it would race the
resolver.
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback_address", "is_loopback_host"]

_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


def is_loopback_host(host: str) -> bool:
    """``localhost``, 127.0.0.0/8 or ``::1`` (brackets allowed: ``[::1]``); any other name is not."""
    host = host.strip("[]").lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback_address(address: str) -> bool:
    """The host of a gRPC target (``host:port``, ``[::1]:port``, ``ipv4:``/``ipv6:`` schemes) is loopback."""
    target = address.removeprefix("ipv4:").removeprefix("ipv6:")
    if target.startswith("["):  # [::1]:9090 or [::1]
        host = target[1 : target.find("]")] if "]" in target else target
    elif target.count(":") == 1:  # host:port
        host = target.rsplit(":", 1)[0]
    else:  # a bare host, or a bare IPv6 address without a port
        host = target
    return is_loopback_host(host)
