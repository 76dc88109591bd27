"""Integrations that move LKSTREAM data elsewhere; today the Kafka bridge (:mod:`lkstream.bridge.kafka`).

Uses the public client API (``lkstream.connect``) and aiokafka; never storage internals or the server.
"""

from lkstream.bridge.kafka import BridgeMetrics, BridgeSettings, KafkaBridge
from lkstream.bridge.target_security import KafkaSecurity

__all__ = ["BridgeMetrics", "BridgeSettings", "KafkaBridge", "KafkaSecurity"]
