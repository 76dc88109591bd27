"""The daemon: its process (``daemon.py``, ``settings.py``) and its serving surfaces over one broker.

``grpc/`` serves ``proto/messaging.proto`` and ``http/`` the HTTP endpoints and JSON API; the modules
here are what both share (ACL needs, admin calls off the loop, the stopping signal, heap trimming).
May import the broker, ``lkstream.kafka`` (the daemon starts its listener), ``lkstream.security`` and
``lkstream.wire``; never ``lkstream.client``.
"""
