"""Storage layer: plain synchronous, thread-safe Python. No asyncio, no network.

PartitionLog -> Segment (.seg + .idx), recovery, retention, group-commit fsync, OffsetStore.
May import ``lkstream.format`` only (and ``errors``/``config``); an import contract keeps
asyncio, grpc, prometheus_client and pyspark out.
"""
