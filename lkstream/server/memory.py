"""Hand freed heap memory back to the operating system after a burst of large requests (issue 12, finding 8).

A burst of large produce requests leaves glibc's heaps full of freed chunks: each of
gRPC core's threads allocates in its own arena, a 4 MiB buffer freed in the middle of
an arena cannot shrink it, and the dynamic mmap threshold grows past the request size
after the first few, so later ones come from the arenas too. The memory is free for
the process but stays resident: 256 concurrent 4 MiB produces left 2.6 GiB behind.

:class:`HeapTrimmer` listens to the admission budget
(:attr:`~lkstream.broker.admission.AdmissionBudget.on_drained`): once the listeners hold
no request bytes after a sizeable peak and the budget stayed low for ``quiet_s``, it
calls glibc's ``malloc_trim(0)`` in a worker thread (it walks every arena and returns
their free pages with ``MADV_DONTNEED``), at most once per ``min_interval_s``, so a
steady stream of large requests is not interrupted by trims. Without glibc (musl, macOS) it does nothing.

:func:`keep_heap_for_requests` is the other half (issue 14, rows 5 and 6): glibc's
default thresholds hand a freed 200 KB-1 MiB buffer (a produce batch, a fetch answer,
their protobuf copies) back to the kernel at once, so the next one faults its pages
in again: a 210 KB ``bytearray`` copy took 113-169 us instead of 11-18 us. Fixed
thresholds keep up to :data:`HEAP_TRIM_THRESHOLD` free at the top of each heap for
the next request; larger buffers (over :data:`HEAP_MMAP_THRESHOLD`) are still mapped
and unmapped on their own, and the trimmer still returns what a burst left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import time
from collections.abc import Callable
from typing import Final

from lkstream.broker.admission import DRAIN_REPORT_BYTES, AdmissionBudget

log = logging.getLogger("lkstream.server")

#: A trim waits until the budget stayed below DRAIN_REPORT_BYTES this long after draining.
DEFAULT_QUIET_S: Final = 1.0
#: At most one trim per this many seconds (a trim of a large heap takes milliseconds, holding its arena).
DEFAULT_MIN_INTERVAL_S: Final = 5.0


#: Buffers up to this size come from the heap; larger ones are mapped and unmapped on their own.
HEAP_MMAP_THRESHOLD: Final = 4 * 1024 * 1024
#: Free memory kept at the top of a heap for the next request instead of handed back at each free.
HEAP_TRIM_THRESHOLD: Final = 8 * 1024 * 1024
# mallopt parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim  # noqa: B018 (only glibc has it)
    except (OSError, AttributeError):  # not glibc
        return None
    return libc


def _glibc_malloc_trim() -> Callable[[int], int] | None:
    libc = _glibc()
    if libc is None:
        return None
    trim = libc.malloc_trim
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def keep_heap_for_requests(
    trim_threshold: int = HEAP_TRIM_THRESHOLD, mmap_threshold: int = HEAP_MMAP_THRESHOLD
) -> bool:
    """Set glibc's trim and mmap thresholds for this process (see the module docstring).

    Fixed values also end glibc's dynamic thresholds, which grew with the largest request
    seen (up to 32 MiB). Returns whether they were set (False without glibc).
    """
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold)) and bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold))


class HeapTrimmer:
    """Trim the heaps (off the event loop) once ``budget`` drained after a burst and stayed low ``quiet_s``."""

    def __init__(
        self,
        budget: AdmissionBudget,
        loop: asyncio.AbstractEventLoop,
        *,
        quiet_s: float = DEFAULT_QUIET_S,
        min_interval_s: float = DEFAULT_MIN_INTERVAL_S,
        malloc_trim: Callable[[int], int] | None = None,
    ) -> None:
        self._trim = malloc_trim if malloc_trim is not None else _glibc_malloc_trim()
        self._loop = loop
        self._budget = budget
        self.quiet_s = quiet_s
        self.min_interval_s = min_interval_s
        self._last = -min_interval_s
        self._pending: asyncio.TimerHandle | None = None
        self._running = False
        #: Trims done (for tests and benchmarks).
        self.trims = 0
        if self._trim is not None:
            budget.on_drained.append(self._drained)

    @property
    def available(self) -> bool:
        """Whether this platform can trim (glibc)."""
        return self._trim is not None

    def close(self) -> None:
        if self._drained in self._budget.on_drained:
            self._budget.on_drained.remove(self._drained)
        if self._pending is not None:
            self._pending.cancel()

    def _drained(self, peak: int) -> None:
        # Called where the last admission was released, on any thread.
        with contextlib.suppress(RuntimeError):  # the loop is closed: the daemon is gone
            self._loop.call_soon_threadsafe(self._arm)

    def _arm(self) -> None:
        if self._pending is None and not self._running:
            delay = max(self.quiet_s, self._last + self.min_interval_s - time.monotonic())
            self._pending = self._loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._pending = None
        if self._budget.held >= DRAIN_REPORT_BYTES:
            return  # another burst is under way; its drain arms the next trim
        self._last, self._running = time.monotonic(), True
        self._loop.run_in_executor(None, self._run).add_done_callback(self._done)

    def _run(self) -> None:
        assert self._trim is not None
        started = time.perf_counter()
        self._trim(0)
        self.trims += 1
        log.debug("returned free heap memory to the OS in %.1f ms", 1e3 * (time.perf_counter() - started))

    def _done(self, future: asyncio.Future[None]) -> None:
        self._running = False
        if not future.cancelled() and future.exception() is not None:
            log.warning("malloc_trim failed: %s", future.exception())
