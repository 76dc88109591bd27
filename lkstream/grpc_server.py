"""``python -m lkstream.grpc_server --config conf/local.yml``: run the LKSTREAM daemon.

Reads the YAML config (broker keys at the top level, server keys at the top
level or under ``server:``), starts the gRPC server over one broker, prints one
``lkstream daemon ready: grpc=HOST:PORT ...`` line on stdout once it serves,
and exits 0 after a graceful shutdown on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import logging
import sys

from lkstream.errors import InvalidArgumentError
from lkstream.server.grpc_server import run
from lkstream.server.settings import load_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lkstream.grpc_server", description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="YAML config file (default: built-in defaults)")
    parser.add_argument("--persist-dir", help="data directory (overrides the config)")
    parser.add_argument("--grpc-host", help="gRPC listen address (overrides the config)")
    parser.add_argument("--grpc-port", type=int, help="gRPC port, 0 for any free port (overrides the config)")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings, config = load_config(
            args.config, persist_dir=args.persist_dir, grpc_host=args.grpc_host, grpc_port=args.grpc_port
        )
    except InvalidArgumentError as exc:
        print(f"lkstream: {exc}", file=sys.stderr)
        return 2
    return run(settings, config)


if __name__ == "__main__":
    sys.exit(main())
