"""Deleted topics' files are removed by one background thread (issue 12, finding 9).

A delete commits with one rename into ``trash/`` (see :meth:`TopicStore.move_to_trash`);
removing the trashed directory afterwards is housekeeping that nothing waits for. Done in
the deleting call it took seconds for a topic of thousands of partitions (paced, so that the
event loop keeps the GIL: :mod:`lkstream.storage.pacing`), and the caller waited for it.
Here the call returns after the rename and this thread empties the trash behind it.

What the thread has not removed when it is stopped (a close, a crash) stays in ``trash/``,
which :class:`TopicStore` empties when it next opens: the trash is never read, so a
leftover costs disk space until then and nothing else.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

#: Tells the thread to end (any path is a ``str``).
_STOP: Final = object()


class TrashEmptier:
    """Removes trashed directories one after another with ``empty(path, stop)`` in a thread of its own."""

    def __init__(self, empty: Callable[[str, threading.Event], None]) -> None:
        self._empty = empty
        self._stop = threading.Event()
        self._queue: queue.Queue[object] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="lkstream-trash", daemon=True)
        self._thread.start()

    def submit(self, trashed: str) -> None:
        """Queue ``trashed`` (a directory already renamed into the trash) for removal."""
        self._queue.put(trashed)

    def settle(self) -> None:
        """Block until everything submitted so far is removed (tests; a backup of a quiet directory)."""
        self._queue.join()

    def close(self) -> None:
        """Stop after the current pacing step; what is left goes at the next open."""
        self._stop.set()
        self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                if not self._stop.is_set():
                    assert isinstance(item, str)
                    self._empty(item, self._stop)
            except Exception:  # a removal that fails is retried by the next open; the thread lives on
                log.exception("emptying %s from the trash failed; the next start retries", item)
            finally:
                self._queue.task_done()
