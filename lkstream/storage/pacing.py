"""Long admin loops hand the GIL to the other threads on a schedule (issue 12, finding 9).

Creating or deleting a topic of thousands of partitions is a loop of short system calls
(``mkdir``, ``rmdir``) with a little Python between them, run in a worker thread beside the
daemon's event loop. Each system call releases the GIL, and the worker takes it back as
soon as the call returns, usually before the operating system has even woken the thread
that was waiting for it: the waiter finds the GIL taken again and goes back to sleep.
CPython's switch interval does not help, because it only forces a switch when the GIL has
not changed hands for 5 ms, and here it changes hands (back to the worker) every few
microseconds. Measured beside a 4,000-partition create: the daemon's group-commit thread
made no fsync at all for whole seconds, and other clients' produce p99 went from ~10 ms to
hundreds (docs/benchmarks-notes.md, "Admin work beside other clients").

A :class:`Pacer` sleeps ``pause_s`` after every ``work_s`` of work: sleeping (unlike a
system call that returns at once) leaves the GIL free long enough for the waiting threads
to be scheduled and take it.
"""

from __future__ import annotations

from time import perf_counter, sleep
from typing import Final

#: Work between pauses, and the pause: the loop runs at about a quarter of its speed alone.
#: Admin work is not latency-critical, the other clients' calls are: at 2 ms / 2 ms a churn of
#: 4,000-partition topics kept half a core busy with ``mkdir``/``rmdir`` and their p99 doubled
#: on a quiet two-core machine (docs/benchmarks-notes.md, "Admin work beside other clients").
WORK_S: Final = 0.001
PAUSE_S: Final = 0.003


class Pacer:
    """Call :meth:`step` after each unit of work; it sleeps ``pause_s`` once ``work_s`` has passed."""

    def __init__(self, work_s: float = WORK_S, pause_s: float = PAUSE_S) -> None:
        if work_s <= 0 or pause_s <= 0:
            raise ValueError(f"work_s and pause_s must be positive, got {work_s}, {pause_s}")
        self.work_s = work_s
        self.pause_s = pause_s
        self.pauses = 0
        self._since = perf_counter()

    def step(self) -> None:
        if perf_counter() - self._since >= self.work_s:
            self.pauses += 1
            sleep(self.pause_s)
            self._since = perf_counter()
