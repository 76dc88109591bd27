"""Keep the daemon's start-up heap out of CPython's full garbage collections (issue 12, finding 9).

A started daemon holds 50,000-120,000 objects the collector tracks (the modules of gRPC,
protobuf, aiohttp, pydantic, the Kafka listener, the topics opened at start-up) that live
as long as the process. Every full collection walked all of them while holding the GIL:
measured in the daemon of ``benchmarks/soak/bench_admin_isolation.py``, 55-120 ms at load 4 on
two cores, during which no client was served; such a pause showed as the first stall of
every quiet window. :func:`freeze_start_up_heap` collects once, then moves every object
alive at that moment to the collector's permanent generation (``gc.freeze``), so later
collections walk only what was created since.

The trade-off: a frozen object is never examined by the collector again. Objects freed by
reference counting (which includes a deleted topic's partitions: nothing in them refers
back to itself) are still freed at once; only a reference cycle among objects alive at
start-up that is dropped later would stay in memory. The objects frozen are the
process's long-lived ones, so that waste is small and bounded by the start-up heap.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("lkstream.server")


def freeze_start_up_heap() -> int:
    """Collect, then exclude every object alive now from later collections; return how many were frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug("froze %d start-up objects out of the garbage collector's walks", frozen)
    return frozen
