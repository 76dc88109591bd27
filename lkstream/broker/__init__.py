"""Broker layer: topics, partitions, partitioner, hot tail, backpressure, groups and metrics.

Synchronous and thread-safe, with async twins for callers on an event loop. May import
``lkstream.storage`` and ``lkstream.format``; never a surface (server, kafka, client, cli).
"""
