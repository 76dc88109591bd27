"""``lkstream bridge``: copy LKSTREAM topics into Kafka, at least once (see :mod:`lkstream.bridge.kafka`).

::

    lkstream bridge --topics market.ticks --kafka-bootstrap kafka:9092 [--bootstrap 127.0.0.1:9090]

Runs until SIGTERM or Ctrl-C, then flushes, commits and exits 0; exits 1 when
Kafka or the daemon cannot be reached or a target topic does not fit.

Access control on both sides: ``--token``/``--tls-ca`` reach an LKSTREAM daemon with
authentication on (as every command that talks to a daemon); ``--kafka-security-protocol``,
``--kafka-sasl-mechanism``, ``--kafka-username``, ``--kafka-password`` (better:
``$LKSTREAM_BRIDGE_KAFKA_PASSWORD``, which no process listing shows) and ``--kafka-tls-ca``
reach a Kafka cluster with TLS and SASL.
"""

from __future__ import annotations

import asyncio
import logging

import click

from lkstream.bridge import BridgeSettings, KafkaSecurity
from lkstream.bridge.process import run_bridge
from lkstream.bridge.target_security import PROTOCOLS, SASL_MECHANISMS
from lkstream.cli.base import bootstrap_option, cli, daemon_credentials
from lkstream.errors import InvalidArgumentError


@cli.command()
@click.option("--topics", required=True, help="Comma-separated LKSTREAM topics to copy.")
@click.option("--kafka-bootstrap", required=True, metavar="HOST:PORT", help="A Kafka broker to bootstrap from.")
@bootstrap_option
@click.option(
    "--kafka-security-protocol",
    type=click.Choice(PROTOCOLS),
    default="PLAINTEXT",
    show_default=True,
    help="Kafka's security.protocol towards the target cluster.",
)
@click.option("--kafka-sasl-mechanism", type=click.Choice(SASL_MECHANISMS), help="SASL mechanism (SASL_*).")
@click.option("--kafka-username", metavar="USER", help="SASL user name.")
@click.option(
    "--kafka-password",
    metavar="PASSWORD",
    envvar="LKSTREAM_BRIDGE_KAFKA_PASSWORD",
    help="SASL password (default: $LKSTREAM_BRIDGE_KAFKA_PASSWORD, which ps does not show).",
)
@click.option(
    "--kafka-tls-ca",
    metavar="PEM",
    type=click.Path(exists=True, dir_okay=False),
    help="CA file the Kafka brokers' certificates chain to (SSL, SASL_SSL; default: the system's CAs).",
)
@click.option("--group", default="lkstream-bridge", show_default=True, help="LKSTREAM consumer group of the bridge.")
@click.option(
    "--target-topic",
    default="{topic}",
    show_default=True,
    help="Kafka topic name; {topic} is replaced by the LKSTREAM topic.",
)
@click.option(
    "--partitioning",
    type=click.Choice(["same", "key-hash"]),
    default="same",
    show_default=True,
    help="same: partition N goes to Kafka partition N; key-hash: Kafka's partitioner picks by key.",
)
@click.option("--idempotence", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True)
@click.option("--no-create-topics", is_flag=True, help="Fail instead of creating missing Kafka topics.")
@click.option(
    "--commit-every",
    type=click.IntRange(min=1),
    default=5000,
    show_default=True,
    help="Records between waiting for Kafka's acks and committing.",
)
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="Serve Prometheus /metrics on this port.")
@click.option("--metrics-host", default="127.0.0.1", show_default=True)
@click.option("--log-level", default="INFO", show_default=True)
def bridge(
    *,
    topics: str,
    kafka_bootstrap: str,
    bootstrap: str,
    group: str,
    target_topic: str,
    partitioning: str,
    idempotence: str,
    no_create_topics: bool,
    commit_every: int,
    metrics_port: int | None,
    metrics_host: str,
    log_level: str,
    kafka_security_protocol: str,
    kafka_sasl_mechanism: str | None,
    kafka_username: str | None,
    kafka_password: str | None,
    kafka_tls_ca: str | None,
) -> None:
    """Copy TOPICS from the daemon into Kafka; commit in LKSTREAM only what Kafka acknowledged."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        security = KafkaSecurity(
            protocol=kafka_security_protocol,  # type: ignore[arg-type]  # click.Choice checked it
            sasl_mechanism=kafka_sasl_mechanism,
            username=kafka_username,
            password=kafka_password,
            ca_file=kafka_tls_ca,
        )
    except InvalidArgumentError as exc:
        raise click.UsageError(str(exc)) from None
    settings = BridgeSettings(
        topics=[t.strip() for t in topics.split(",") if t.strip()],
        kafka_bootstrap=kafka_bootstrap,
        group=group,
        target_topic=target_topic,
        partitioning=partitioning,  # type: ignore[arg-type]  # click.Choice checked it
        idempotence=idempotence,  # type: ignore[arg-type]
        create_topics=not no_create_topics,
        commit_every=commit_every,
        kafka_security=security,
    )
    asyncio.run(
        run_bridge(settings, bootstrap, metrics_host=metrics_host, metrics_port=metrics_port, **daemon_credentials())
    )
