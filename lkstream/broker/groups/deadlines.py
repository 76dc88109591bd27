"""``Deadlines``: when to look at a key next, so that expiry never walks every member of every group.

Both group coordinators expire members (and the classic one pending member ids and
rebalances) at deadlines that move all the time: every heartbeat pushes a member's
session deadline later. Rescheduling on every heartbeat would fill a heap with stale
entries, so a key holds *one check time*, never later than its real deadline:

* :meth:`Deadlines.schedule` asks for a check no later than ``due`` (an earlier check
  time wins; a later one is ignored, the existing check comes first);
* :meth:`Deadlines.pop_due` hands out the keys whose check time came, each once; the
  owner then looks at the key's real deadline and either expires it or schedules the
  next check at that deadline.

Each call costs O(log n) per key handed out, so a join pays for the keys that are due,
not for all the keys there are. Entries of cancelled or re-scheduled keys stay in the
heap until they come up (and are then skipped); the heap is rebuilt when they
outnumber the live ones, so its size stays within a constant factor of the number of keys.
Not thread-safe: its owner's lock guards it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

_REBUILD_SLACK = 1024  # stale entries tolerated beyond the live ones before the heap is rebuilt


class Deadlines(Generic[K]):
    """Check times per key (see the module docstring)."""

    def __init__(self) -> None:
        self._at: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._at)

    def schedule(self, key: K, due: float) -> None:
        """Make sure ``key`` is handed out by :meth:`pop_due` at ``due`` or earlier."""
        current = self._at.get(key)
        if current is not None and current <= due:
            return
        self._at[key] = due
        heapq.heappush(self._heap, (due, next(self._order), key))
        if len(self._heap) > 2 * len(self._at) + _REBUILD_SLACK:
            self._heap = [(at, next(self._order), k) for k, at in self._at.items()]
            heapq.heapify(self._heap)

    def cancel(self, key: K) -> None:
        """Forget ``key`` (its heap entry is skipped when it comes up)."""
        self._at.pop(key, None)

    def pop_due(self, now: float) -> list[K]:
        """The keys whose check time is ``now`` or earlier, in check-time order; each is forgotten."""
        due: list[K] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            at, _, key = heapq.heappop(heap)
            if self._at.get(key) == at:
                del self._at[key]
                due.append(key)
        return due

    def next_due(self) -> float | None:
        """The earliest check time, or None when no key is scheduled."""
        while self._heap and self._at.get(self._heap[0][2]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None
