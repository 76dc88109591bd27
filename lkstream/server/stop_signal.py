"""The daemon's "stopping" signal, which waits of every kind end on without a task each."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class StopSignal(asyncio.Event):
    """An :class:`asyncio.Event` that also runs callbacks when set.

    A Subscribe stream or a long-poll Fetch waits for data *or* shutdown. Waiting on both
    with ``asyncio.wait`` took two tasks per wait (one around the data's future, one around
    ``Event.wait``), created and cancelled on every record batch delivered; a callback here
    resolves the data's future instead (:meth:`BrokerService._arrival`). At most one
    callback per waiting call (bounded by connections times streams per connection).
    """

    def __init__(self) -> None:
        super().__init__()
        self.listeners: set[Callable[[], None]] = set()

    def set(self) -> None:
        super().set()
        for listener in list(self.listeners):
            listener()
