"""The daemon's gRPC surface: the ``lkstream.Broker`` servicer, its access interceptors and limits.

``server.py`` serves ``proto/messaging.proto`` over one :class:`~lkstream.broker.broker.Broker`; the
other modules are its roles (access, admission limits, group and stream RPCs, per-RPC permissions, the
error guard). May import ``lkstream.server``'s shared modules, ``lkstream.wire``, ``lkstream.security``
and the broker; never the HTTP surface (``lkstream.server.http``).
"""
