"""How fast each caller may auto-create topics: one token bucket per principal or client address.

A topic is auto-created when a caller names one that does not exist (a produce on any
surface, a Kafka Metadata request, a gRPC describe with ``create_if_missing``). Each such
topic takes its partition count from the caller's bucket: ``burst`` partitions at once, refilled
at ``rate_per_s`` (``auto_create_partitions_burst``, ``auto_create_partitions_per_s``). An empty
bucket refuses with :class:`~lkstream.errors.AutoCreateThrottledError` (retriable, with
``retry_after_ms``) and nothing is created; a full bucket lets one topic through whatever its
size, so a default partition count above the burst still works, slowly. Explicit creates
(CreateTopics, gRPC/HTTP create) are not counted: they are deliberate, and need their own ACL.

Why per caller (issue 28, finding 6): 50 Metadata requests naming 100 new topics each created
4,096 topics in 5.8 s and used up ``max_partitions`` for every other client. With a bucket a
storm costs its sender ``burst`` topics and then ``rate_per_s``; ``max_partitions`` stays the
limit of all topics together, with its own clear error (:class:`~lkstream.errors.PartitionLimitError`).

Who a caller is: the surface says (``requester``): its principal when authentication is on,
else its client address (every loopback client is one caller then). At most
:data:`MAX_REQUESTERS` buckets are kept; beyond that the least recently used is dropped, which
gives that caller a full bucket again (a caller that could open that many identities could
create that many topics anyway).

Thread-safe (a leaf lock).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from lkstream.errors import AutoCreateThrottledError

#: Buckets kept at once (least recently used dropped beyond it).
MAX_REQUESTERS: Final = 10_000


class AutoCreateBudget:
    """Per-requester token buckets of partitions to auto-create (see the module docstring)."""

    def __init__(
        self,
        rate_per_s: int,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_requesters: int = MAX_REQUESTERS,
    ) -> None:
        if rate_per_s < 1 or burst < 1 or max_requesters < 1:
            raise ValueError("rate_per_s, burst and max_requesters must be >= 1")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._max_requesters = max_requesters
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # requester -> (tokens, at)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, requester: str, partitions: int, topic: str) -> None:
        """Take ``partitions`` from ``requester``'s bucket for ``topic``, or raise AutoCreateThrottledError."""
        with self._lock:
            tokens = self._tokens(requester)
            if tokens < partitions and tokens < self.burst:
                wanted = min(partitions, self.burst)
                retry_after_ms = max(1, math.ceil((wanted - tokens) * 1000 / self.rate_per_s))
                raise AutoCreateThrottledError(topic, self.rate_per_s, self.burst, retry_after_ms)
            self._store(requester, tokens - partitions)

    def give_back(self, requester: str, partitions: int) -> None:
        """Return what :meth:`take` took for a topic that was not created after all."""
        with self._lock:
            self._store(requester, min(self.burst, self._tokens(requester) + partitions))

    def _tokens(self, requester: str) -> float:
        """``requester``'s tokens now (caller holds the lock)."""
        now = self._clock()
        kept = self._buckets.get(requester)
        if kept is None:
            return float(self.burst)
        tokens, at = kept
        return min(float(self.burst), tokens + (now - at) * self.rate_per_s)

    def _store(self, requester: str, tokens: float) -> None:
        self._buckets[requester] = (tokens, self._clock())
        self._buckets.move_to_end(requester)
        while len(self._buckets) > self._max_requesters:
            self._buckets.popitem(last=False)
