"""The daemon's serving surfaces: gRPC (:mod:`lkstream.server.grpc_server`) and HTTP (:mod:`lkstream.server.http`)."""
