"""The one budget of request bytes the daemon's listeners hold at once (issue 12, finding 8).

Every network surface (gRPC, HTTP, the Kafka listener) reserves a request's size
here *before* it decodes the request, and releases it when the request is
answered. ``max_inflight_bytes`` (:mod:`lkstream.broker.acks`) counts only produce
data waiting for its acknowledgement, after decoding; memory is spent earlier: a
4 MiB produce is held as the transport's buffer, the raw message, the decoded
message and the batch, so 256 concurrent ones reached 2.7 GiB before that limit
was even asked. Admission before decoding bounds what the surfaces hold to
about a small multiple of ``max_admitted_bytes``.

Rules:

* A request of ``size`` bytes is admitted while ``held + size <= limit``, and
  always when nothing is held: a lone request larger than the budget (up to the
  transport's message limit) must still be able to pass.
* **Small requests keep a reserve.** Requests above :data:`SMALL_REQUEST_BYTES`
  (produce data) may fill only ``limit - reserve_bytes``; the rest (an eighth of
  the budget, at least 1 MiB) stays free for small ones (heartbeats, commits,
  metadata, fetch requests), so a flood of produce data cannot starve group
  membership into rebalances.
* A request that does not fit waits for room, unread, for a short while
  (:meth:`AdmissionBudget.admit`; the gRPC and HTTP listeners wait up to
  :data:`ADMISSION_WAIT_S`), then is refused with
  :class:`~lkstream.errors.OverloadedError` and its ``retry_after_ms``: gRPC answers
  RESOURCE_EXHAUSTED, HTTP 429 with ``Retry-After``. The Kafka listener waits longer
  (it stops reading the connection, as Kafka's ``queued.max.request.bytes`` does),
  because a Kafka client has no "retry later" answer it understands.
* A surface that learns a request's size only by reading it (gRPC) reserves a
  :class:`SizeEstimate` first and corrects it once read (:meth:`Admission.resize`).
* When the held bytes fall back to zero after a peak of at least
  :data:`DRAIN_REPORT_BYTES`, the ``on_drained`` callbacks run with that peak (the
  daemon uses it to hand freed heap memory back to the operating system).

Thread-safe: one leaf lock, held only for bookkeeping; wake-ups and callbacks run
outside it. An :class:`Admission` belongs to the request that got it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Final

from lkstream.broker.wakeups import run_on_loop
from lkstream.errors import InvalidArgumentError, OverloadedError

MiB: Final = 1024 * 1024
#: Requests up to this size count as "small" and may use the reserve.
SMALL_REQUEST_BYTES: Final = 64 * 1024
#: What a refusal advises: retry after this long (clients add jitter).
DEFAULT_RETRY_AFTER_MS: Final = 200
#: How long the gRPC and HTTP listeners let a request wait, unread, for room before refusing it.
ADMISSION_WAIT_S: Final = 1.0
#: A drain after a peak below this is not worth reporting (nothing sizeable to give back).
DRAIN_REPORT_BYTES: Final = 8 * MiB


def default_reserve(limit: int) -> int:
    """The part of ``limit`` only small requests may use: an eighth, at least 1 MiB, at most half."""
    return min(limit // 2, max(MiB, limit // 8))


class Admission:
    """``nbytes`` of the budget held by one request; :meth:`release` (or ``with``) gives them back, once."""

    __slots__ = ("_budget", "nbytes")

    def __init__(self, budget: AdmissionBudget, nbytes: int) -> None:
        self._budget = budget
        self.nbytes = nbytes

    def release(self) -> None:
        nbytes, self.nbytes = self.nbytes, 0
        if nbytes:
            self._budget._release(nbytes)

    def resize(self, nbytes: int) -> None:
        """Hold ``nbytes`` instead: the request turned out to be that large once read.

        Never refused (the bytes are already in memory); a larger size may take the
        budget past its limit until this request is answered, and later requests wait.
        """
        delta, self.nbytes = nbytes - self.nbytes, nbytes
        if delta > 0:
            self._budget._grow(delta)
        elif delta < 0:
            self._budget._release(-delta)

    def __enter__(self) -> Admission:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class AdmissionBudget:
    """Request bytes held by the listeners, bounded by ``limit`` (see the module docstring)."""

    def __init__(
        self,
        limit: int,
        *,
        reserve_bytes: int | None = None,
        retry_after_ms: int = DEFAULT_RETRY_AFTER_MS,
    ) -> None:
        if limit < 1:
            raise InvalidArgumentError(f"the admission budget must be positive, got {limit}")
        self.limit = limit
        self.reserve_bytes = default_reserve(limit) if reserve_bytes is None else reserve_bytes
        self.retry_after_ms = retry_after_ms
        #: Called with the peak when the held bytes return to zero after a peak >= DRAIN_REPORT_BYTES.
        self.on_drained: list[Callable[[int], None]] = []
        self._lock = threading.Lock()
        self._held = 0
        self._peak_since_drain = 0
        self._waiters: list[_Waiter] = []
        #: The most bytes ever held at once (for tests and benchmarks).
        self.high_water = 0
        #: Refusals per listener name (a handful of fixed names: bounded).
        self.refused: dict[str, int] = {}

    @property
    def held(self) -> int:
        """Bytes admitted and not yet released."""
        return self._held

    def _fits(self, nbytes: int) -> bool:
        if self._held == 0:
            return True
        ceiling = self.limit if nbytes <= SMALL_REQUEST_BYTES else self.limit - self.reserve_bytes
        return self._held + nbytes <= ceiling

    def _take(self, nbytes: int) -> Admission:
        self._count(nbytes)
        return Admission(self, nbytes)

    def _count(self, nbytes: int) -> None:
        self._held += nbytes
        self._peak_since_drain = max(self._peak_since_drain, self._held)
        self.high_water = max(self.high_water, self._held)

    def refusal(self, nbytes: int, listener: str) -> OverloadedError:
        """The error for a request of ``nbytes`` refused by ``listener`` (counted)."""
        with self._lock:
            self.refused[listener] = self.refused.get(listener, 0) + 1
            held = self._held
        return OverloadedError(held, nbytes, self.limit, self.retry_after_ms)

    def try_admit(self, nbytes: int, listener: str) -> Admission:
        """Admit ``nbytes`` now or raise :class:`OverloadedError` (counted for ``listener``)."""
        with self._lock:
            if self._fits(nbytes):
                return self._take(nbytes)
        raise self.refusal(nbytes, listener)

    def admit_now(self, nbytes: int) -> Admission | None:
        """Admit ``nbytes`` if they fit now, else None (nothing counted): the no-wait path of :meth:`admit`."""
        with self._lock:
            if self._fits(nbytes):
                return self._take(nbytes)
        return None

    async def admit(self, nbytes: int, listener: str, timeout_s: float) -> Admission:
        """Admit ``nbytes``, waiting up to ``timeout_s`` for room; :class:`OverloadedError` after that."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            with self._lock:
                if self._fits(nbytes):
                    return self._take(nbytes)
                waiter: _Waiter = (loop, loop.create_future())
                self._waiters.append(waiter)
            try:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError
                await asyncio.wait_for(waiter[1], remaining)
            except TimeoutError:
                raise self.refusal(nbytes, listener) from None
            finally:
                with self._lock:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)

    def _grow(self, nbytes: int) -> None:
        with self._lock:
            self._count(nbytes)

    def _release(self, nbytes: int) -> None:
        with self._lock:
            self._held -= nbytes
            waiters, self._waiters = self._waiters, []
            peak = 0
            if self._held == 0:
                peak, self._peak_since_drain = self._peak_since_drain, 0
        for loop, future in waiters:
            run_on_loop(loop, _wake, future)
        if peak >= DRAIN_REPORT_BYTES:
            for callback in self.on_drained:
                callback(peak)


class SizeEstimate:
    """A cautious guess of the next request's size, for surfaces that learn it only by reading the request.

    Starts at ``initial``; a larger request raises it at once, smaller ones lower it
    by a sixteenth of the gap each (never below ``floor``). Reserving the guess before
    reading keeps a burst of large requests from all being read at once, while a
    stream of small ones soon reserves little. Not thread-safe (one per listener).
    """

    def __init__(self, initial: int = MiB, floor: int = 4096) -> None:
        self.value = max(initial, floor)
        self.floor = floor

    def observe(self, nbytes: int) -> None:
        if nbytes >= self.value:
            self.value = nbytes
        else:
            self.value = max(self.floor, self.value - (self.value - nbytes) // 16)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
