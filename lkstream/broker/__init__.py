"""Broker layer: topics, partitions, partitioner, hot tail, backpressure."""
