"""Storage layer: plain synchronous, thread-safe Python. No asyncio, no network.

PartitionLog -> Segment (.seg + .idx), recovery, retention, group-commit fsync, OffsetStore.
"""
