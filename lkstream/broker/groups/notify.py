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

    def version(self, group: str) -> int:
        with self._cond:
            return self._versions.get(group, 0)

    def notify(self, group: str) -> None:
        with self._cond:
            self._versions[group] = self._versions.get(group, 0) + 1
            self._cond.notify_all()
            waiters = self._async.pop(group, [])
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody is waiting any more
                loop.call_soon_threadsafe(_wake, future)

    def wait(self, group: str, seen: int, timeout: float | None) -> bool:
        """Block until ``group``'s version differs from ``seen``; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._versions.get(group, 0) != seen, timeout)

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
