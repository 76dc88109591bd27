"""The daemon's HTTP surface (aiohttp): ``/metrics``, ``/healthz``, ``/ready`` and the JSON API.

``app.py`` builds the application; the other modules are its roles (access middlewares, limits,
handlers, models, the error table, the OpenAPI document, seed 003's event-log routes, per-route
permissions). May import ``lkstream.server``'s shared modules, ``lkstream.wire``, ``lkstream.security``
and the broker; never the gRPC surface (``lkstream.server.grpc``).
"""
