"""Waking a coroutine that waits on an event loop, from whichever thread makes it ready.

An append wakes the readers waiting for its data (Subscribe, long-poll Fetch) and a
released admission wakes requests waiting for room. Those calls run on the daemon's
event loop for its network surfaces (gRPC, HTTP and Kafka appends, answers released),
and on other threads for embedded callers or the group committer (``sync`` mode).
``loop.call_soon_threadsafe`` is right from another thread but costs a write to the
loop's self-pipe, a wake-up of its selector and a read, for every waiter and every
append, when the caller already is that loop: there the waiter's future is resolved
directly (which only schedules its callbacks).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TypeVarTuple

_Args = TypeVarTuple("_Args")


def run_on_loop(loop: asyncio.AbstractEventLoop, resolve: Callable[[*_Args], None], *args: *_Args) -> None:
    """Run ``resolve(*args)`` on ``loop``: now when called on that loop, else through ``call_soon_threadsafe``.

    ``resolve`` must be short and never block (it resolves a future); it may run inside the
    caller's locks. A loop that was closed is skipped: nobody waits on it any more.
    """
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:  # a thread without a loop: an embedded caller, the group committer
        running = None
    if running is loop:
        resolve(*args)
        return
    with contextlib.suppress(RuntimeError):  # closed meanwhile
        if not loop.is_closed():
            loop.call_soon_threadsafe(resolve, *args)
