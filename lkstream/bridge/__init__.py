"""Integrations that move LKSTREAM data elsewhere; today the Kafka bridge (:mod:`lkstream.bridge.kafka`)."""

from lkstream.bridge.kafka import BridgeMetrics, BridgeSettings, KafkaBridge

__all__ = ["BridgeMetrics", "BridgeSettings", "KafkaBridge"]
