"""The wire contract between the gRPC daemon and its clients.

``_proto/`` holds the stubs generated from ``proto/messaging.proto`` and
:mod:`lkstream.wire.contract` the protocol version handshake and the table of
which gRPC status each :mod:`lkstream.errors` class travels as. Both the server
(:mod:`lkstream.server`) and the remote client (:mod:`lkstream.client.remote`)
import it; it imports neither, so the two surfaces stay independent.
"""
