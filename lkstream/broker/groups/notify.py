"""``GroupChanged``: a per-group change counter that blocking and asyncio waiters can wait on.

The coordinator calls :meth:`GroupChanged.notify` whenever something a member
could act on changed (a new generation, a partition became free, a member left).
A long-polling heartbeat reads :meth:`version` first, then waits for it to move.
Threads wait on a ``threading.Condition``; coroutines register a future that
``notify`` resolves through ``loop.call_soon_threadsafe``, so an event loop is
never blocked and no thread is parked per asyncio waiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class GroupChanged:
    """Thread-safe. Its lock is a leaf: it takes no other lock while held."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._versions: dict[str, int] = {}
        self._async: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]] = {}
        self._threads: dict[str, int] = {}  # threads waiting per group
        self._forgotten: set[str] = set()  # forgotten while waited on: dropped when the last waiter leaves

    def __len__(self) -> int:
        """Groups with a version held (bounded: :meth:`forget` drops those of forgotten groups)."""
        with self._cond:
            return len(self._versions)

    def forget(self, group: str) -> None:
        """Drop ``group``'s counter (the coordinator forgot the group), unless someone waits on it.

        A counter that is kept while waiters exist cannot lose a wake-up; one dropped reads 0
        again, which a later waiter compares against the version it read then.
        """
        with self._cond:
            if group not in self._async and not self._threads.get(group):
                self._versions.pop(group, None)
            else:
                self._forgotten.add(group)

    def _left_locked(self, group: str) -> None:
        if group in self._forgotten and group not in self._async and not self._threads.get(group):
            self._forgotten.discard(group)
            self._versions.pop(group, None)

    def version(self, group: str) -> int:
        with self._cond:
            return self._versions.get(group, 0)

    def notify(self, group: str) -> None:
        with self._cond:
            self._forgotten.discard(group)
            self._versions[group] = self._versions.get(group, 0) + 1
            self._cond.notify_all()
            waiters = self._async.pop(group, [])
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody is waiting any more
                loop.call_soon_threadsafe(_wake, future)

    def wait(self, group: str, seen: int, timeout: float | None) -> bool:
        """Block until ``group``'s version differs from ``seen``; False on timeout."""
        with self._cond:
            self._threads[group] = self._threads.get(group, 0) + 1
            try:
                return self._cond.wait_for(lambda: self._versions.get(group, 0) != seen, timeout)
            finally:
                self._threads[group] -= 1
                if not self._threads[group]:
                    del self._threads[group]
                self._left_locked(group)

    async def wait_async(self, group: str, seen: int, timeout: float | None) -> bool:
        """Asyncio twin of :meth:`wait`."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (loop, future)
        with self._cond:
            if self._versions.get(group, 0) != seen:
                return True
            self._async.setdefault(group, []).append(entry)
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._cond:
                waiters = self._async.get(group)
                if waiters is not None and entry in waiters:
                    waiters.remove(entry)
                    if not waiters:
                        del self._async[group]
                self._left_locked(group)
