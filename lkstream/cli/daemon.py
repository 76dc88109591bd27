"""``lkstream serve``: run the daemon.

::

    lkstream serve [--config PATH] [--persist-dir DIR] [--grpc-port N] [--http-port N] [--kafka-port N]
                   [--fsync-mode MODE]

``serve`` is ``python -m lkstream.grpc_server``: both call
:func:`lkstream.server.daemon.run_daemon`, and its flags are
:func:`lkstream.config.load_config` overrides (above the file and ``LKSTREAM_*``).
The commands that talk to a daemon live in :mod:`lkstream.cli.produce`,
:mod:`lkstream.cli.consume`, :mod:`lkstream.cli.bench` and :mod:`lkstream.cli.topics`.
"""

from __future__ import annotations

import click

from lkstream.cli.base import cli
from lkstream.server.daemon import run_daemon

# -- serve -----------------------------------------------------------------------------------------


@cli.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML config file.")
@click.option("--persist-dir", help="Data directory (overrides the config).")
@click.option("--fsync-mode", type=click.Choice(["sync", "group", "none"]), help="fsync mode (overrides the config).")
@click.option("--grpc-host", help="gRPC listen address (overrides the config).")
@click.option("--grpc-port", type=click.IntRange(0, 65535), help="gRPC port, 0 for any free port.")
@click.option("--http-host", help="HTTP (/metrics, /healthz, /ready) listen address.")
@click.option("--http-port", type=click.IntRange(0, 65535), help="HTTP port, 0 for any free port.")
@click.option("--kafka-port", type=click.IntRange(-1, 65535), help="Kafka-protocol port, 0 for any free port, -1 off.")
@click.option("--log-level", default="INFO", show_default=True, help="Logging level.")
@click.pass_context
def serve(
    ctx: click.Context,
    *,
    config_path: str | None,
    persist_dir: str | None,
    fsync_mode: str | None,
    grpc_host: str | None,
    grpc_port: int | None,
    http_host: str | None,
    http_port: int | None,
    kafka_port: int | None,
    log_level: str,
) -> None:
    """Run the daemon (gRPC on 9090, HTTP on 8080, Kafka on 9092, loopback) until SIGTERM or Ctrl-C.

    Configuration: built-in defaults < --config file < LKSTREAM_* environment <
    these flags. Prints one `lkstream daemon ready: grpc=... http=... kafka=...` line once
    it serves; exits 0 after a graceful shutdown, 1 if it cannot start, 2 for a
    bad configuration.
    """
    overrides = {
        "persist_dir": persist_dir,
        "fsync_mode": fsync_mode,
        "server.grpc_host": grpc_host,
        "server.grpc_port": grpc_port,
        "server.http_host": http_host,
        "server.http_port": http_port,
        "server.kafka_port": kafka_port,
    }
    ctx.exit(run_daemon(config_path, overrides, log_level=log_level))
