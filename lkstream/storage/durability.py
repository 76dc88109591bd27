"""Group commit: the one thread that fsyncs partition logs.

Modes (``fsync_mode``):

``sync``
    A producer is acknowledged only after its batch is fsynced. Producers that
    arrive while an fsync is running wait for the next one, which covers all of
    them: under concurrency there is one fsync per *round*, not per call.
``group`` (default)
    Producers are acknowledged once the batch is written to the OS. The thread
    fsyncs every ``fsync_interval_ms``, or sooner once ``fsync_group_bytes``
    are waiting. Loss window after a power failure or kernel crash: the
    acknowledged writes of the last ``fsync_interval_ms`` plus the duration of
    one fsync (producers do not wait for ``fsync_group_bytes``: it only makes
    the fsync come sooner under load). A process crash (SIGKILL) loses nothing
    written: the data is in the page cache.
``none``
    No periodic fsync; only rotation and close fsync. The OS decides when data
    reaches the disk.

Callbacks registered with :meth:`GroupCommitter.when_durable` run on the
committer thread after the fsync that covers their offset (or with the error
that fsync raised); they must be quick and must not block.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Protocol

from lkstream.errors import LkstreamError

log = logging.getLogger("lkstream.storage")

DurableCallback = Callable[[BaseException | None], None]


class FsyncMode(StrEnum):
    SYNC = "sync"
    GROUP = "group"
    NONE = "none"


class Flushable(Protocol):
    """What the committer needs from a log (a :class:`~lkstream.storage.log.PartitionLog`)."""

    def flush(self) -> int: ...


Waiter = tuple["Flushable", int, DurableCallback]


class GroupCommitter:
    """Batches fsyncs of many logs on one background thread. Thread-safe."""

    def __init__(
        self,
        mode: FsyncMode,
        interval_ms: int = 100,
        group_bytes: int = 128 * 1024,
        on_fsync: Callable[[float], None] | None = None,
    ) -> None:
        self.mode = mode
        self.interval_s = interval_ms / 1000.0
        self.group_bytes = group_bytes
        self._on_fsync = on_fsync
        self._cond = threading.Condition()
        self._dirty: dict[Flushable, None] = {}
        self._dirty_bytes = 0
        self._waiters: list[Waiter] = []
        # When the next round may run (group mode): set when a round is taken, so that while
        # writes keep coming the thread sleeps until then and the first write of a round need
        # not wake it. Each wake-up costs the writing thread (the event loop) a context switch
        # and a GIL hand-over (issue 14, row 3).
        self._round_due = 0.0
        self._idle = True  # waiting without a deadline: the next write must wake the thread
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="lkstream-group-commit", daemon=True)
        self._thread.start()

    def written(self, target: Flushable, nbytes: int) -> None:
        """Note that ``nbytes`` were appended to ``target`` and await an fsync."""
        if self.mode is FsyncMode.NONE:
            return
        with self._cond:
            # An idle thread sleeps without a deadline: wake it so it starts waiting for
            # _round_due, or the interval would never fire. A thread that is not idle has a
            # round due within one interval from the last one, so before this write's
            # interval is over (the loss window starts with the first unsynced write).
            wake = not self._dirty and self._idle
            if wake:
                self._round_due = time.monotonic() + self.interval_s
            self._dirty[target] = None
            self._dirty_bytes += nbytes
            if wake or self._dirty_bytes >= self.group_bytes:
                self._cond.notify()

    def when_durable(self, target: Flushable, next_offset: int, callback: DurableCallback) -> None:
        """Call ``callback(None)`` once every offset below ``next_offset`` of ``target`` is fsynced."""
        with self._cond:
            if self._closed:
                callback(LkstreamError("group committer is closed"))
                return
            self._dirty[target] = None
            self._waiters.append((target, next_offset, callback))
            self._cond.notify()

    def forget(self, target: Flushable) -> None:
        """Stop tracking a log that is being closed or deleted."""
        with self._cond:
            self._dirty.pop(target, None)

    def _round_is_due(self) -> bool:
        if self._waiters or self._closed:
            return True
        if self.mode is not FsyncMode.GROUP or not self._dirty:
            return False
        return self._dirty_bytes >= self.group_bytes or time.monotonic() >= self._round_due

    def _take_round(self) -> tuple[list[Flushable], list[Waiter]] | None:
        """Wait until a round is due; return its logs and waiters (None once closed and idle)."""
        with self._cond:
            while not self._round_is_due():
                timeout = None
                if self.mode is FsyncMode.GROUP:
                    # Until the next round's time, whether or not anything is dirty yet: writes
                    # usually keep coming. Idle (no deadline) once it passed with nothing to do.
                    remaining = self._round_due - time.monotonic()
                    timeout = remaining if remaining > 0 else None
                self._idle = timeout is None
                self._cond.wait(timeout)
            self._idle = False
            if self._closed and not self._dirty and not self._waiters:
                return None
            waiters, self._waiters = self._waiters, []
            # A waiter's log is flushed even if forget() dropped it from the dirty set since:
            # otherwise the waiter would be acknowledged without any fsync behind it.
            targets = list(dict.fromkeys([*self._dirty, *(w[0] for w in waiters)]))
            self._dirty.clear()
            self._dirty_bytes = 0
            self._round_due = time.monotonic() + self.interval_s
            return targets, waiters

    def _run(self) -> None:
        while (round_ := self._take_round()) is not None:
            targets, waiters = round_
            durable: dict[Flushable, int | BaseException] = {}
            for target in targets:
                started = time.perf_counter()
                try:
                    durable[target] = target.flush()
                except Exception as exc:  # reported to waiters; the thread must survive
                    log.error("fsync failed: %s", exc)
                    durable[target] = exc
                if self._on_fsync is not None:
                    self._on_fsync(time.perf_counter() - started)
            for target, next_offset, callback in waiters:
                outcome = durable.get(target)
                error = outcome if isinstance(outcome, BaseException) else None
                if isinstance(outcome, int) and outcome < next_offset:
                    error = LkstreamError(f"fsync covered offsets below {outcome}, not {next_offset}")
                try:
                    callback(error)
                except Exception:  # a broken callback must not stop durability for others
                    log.exception("durability callback failed")

    def close(self) -> None:
        """Run a final round for everything dirty, then stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()
