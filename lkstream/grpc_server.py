"""``python -m lkstream.grpc_server --config conf/local.yml``: run the LKSTREAM daemon.

Reads the configuration through :func:`lkstream.config.load_config` (YAML file,
then ``LKSTREAM_*`` environment, then these flags; server keys under
``server:``), starts the HTTP endpoints and the gRPC server over one broker,
prints one ``lkstream daemon ready: grpc=HOST:PORT http=HOST:PORT ...`` line on
stdout once it serves, and exits 0 after a graceful shutdown on SIGTERM or
SIGINT. ``lkstream serve`` runs the same function (:func:`run_daemon`).
"""

from __future__ import annotations

import argparse
import sys

from lkstream.server.daemon import run_daemon


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lkstream.grpc_server", description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="YAML config file (default: built-in defaults)")
    parser.add_argument("--persist-dir", help="data directory (overrides the config)")
    parser.add_argument("--fsync-mode", choices=["sync", "group", "none"], help="fsync mode (overrides the config)")
    parser.add_argument("--grpc-host", help="gRPC listen address (overrides the config)")
    parser.add_argument("--grpc-port", type=int, help="gRPC port, 0 for any free port (overrides the config)")
    parser.add_argument("--http-host", help="HTTP listen address (overrides the config)")
    parser.add_argument("--http-port", type=int, help="HTTP port, 0 for any free port (overrides the config)")
    parser.add_argument("--kafka-port", type=int, help="Kafka-protocol port, 0 for any free port, -1 off")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    args = parser.parse_args(argv)
    overrides = {
        "persist_dir": args.persist_dir,
        "fsync_mode": args.fsync_mode,
        "server.grpc_host": args.grpc_host,
        "server.grpc_port": args.grpc_port,
        "server.http_host": args.http_host,
        "server.http_port": args.http_port,
        "server.kafka_port": args.kafka_port,
    }
    return run_daemon(args.config, overrides, log_level=args.log_level)


if __name__ == "__main__":
    sys.exit(main())
