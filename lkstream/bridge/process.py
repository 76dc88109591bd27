"""The bridge as a process (``lkstream bridge``, examples/kafka_bridge.py): signals, metrics, exit codes.

SIGTERM and SIGINT stop the copy loop; the bridge then waits for Kafka's
acknowledgements and commits them before exiting 0, so a clean stop leaves no
duplicates behind. Metrics are served on ``/metrics`` of ``metrics_port`` when
given (bound to ``metrics_host``, loopback by default).
"""

from __future__ import annotations

import asyncio
import logging
import signal

from prometheus_client import start_http_server

from lkstream.bridge.kafka import BridgeMetrics, BridgeSettings, KafkaBridge
from lkstream.client.remote import connect
from lkstream.security.tls import ClientTls

log = logging.getLogger("lkstream.bridge")


async def run_bridge(
    settings: BridgeSettings,
    lkstream_address: str,
    *,
    metrics_host: str = "127.0.0.1",
    metrics_port: int | None = None,
    token: str | None = None,
    tls: bool | str | ClientTls | None = None,
) -> None:
    """Run one bridge against the daemon at ``lkstream_address`` until SIGTERM/SIGINT.

    ``token`` and ``tls`` reach a daemon with access control (``lkstream.connect``'s).
    """
    metrics = BridgeMetrics()
    if metrics_port is not None:
        server, _ = start_http_server(metrics_port, metrics_host, registry=metrics.registry)
        log.info("bridge metrics on http://%s:%d/metrics", metrics_host, server.server_port)
    loop = asyncio.get_running_loop()
    with connect(lkstream_address, token=token, tls=tls) as source:
        bridge = KafkaBridge(source, settings, metrics=metrics)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, bridge.stop)
        try:
            log.info(
                "bridging %s from %s to Kafka at %s (group %s)",
                ", ".join(settings.topics),
                lkstream_address,
                settings.kafka_bootstrap,
                settings.group,
            )
            await bridge.run()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
    log.info("bridge stopped cleanly")
