"""Long admin loops hand the GIL to the other threads on a schedule (issue 12, finding 9).

Creating or deleting a topic of thousands of partitions is a loop of short system calls
with a little Python between them, run in a worker thread beside the daemon's event loop.
Each system call releases the GIL, but the worker takes it back as soon as the call
returns, usually before the operating system has woken the event loop's thread that was
waiting for it; CPython's switch interval never fires, because the GIL did change hands.
Measured with a thread that sleeps 1 ms in a loop beside such a create: woken up to 80 ms
late (docs/benchmarks.md, "Admin work beside other clients"). A :class:`Pacer` sleeps
for a moment every few steps, long enough for a waiting thread to run.
"""

from __future__ import annotations

from time import sleep
from typing import Final

#: Steps (partitions) between pauses, and the pause: about a tenth of the loop's time.
STEPS_PER_PAUSE: Final = 64
PAUSE_S: Final = 0.001


class Pacer:
    """Call :meth:`step` once per unit of work; every ``every`` steps it sleeps ``pause_s``."""

    def __init__(self, every: int = STEPS_PER_PAUSE, pause_s: float = PAUSE_S) -> None:
        if every < 1:
            raise ValueError(f"every must be positive, got {every}")
        self.every = every
        self.pause_s = pause_s
        self.pauses = 0
        self._steps = 0

    def step(self) -> None:
        self._steps += 1
        if self._steps % self.every == 0:
            self.pauses += 1
            sleep(self.pause_s)
