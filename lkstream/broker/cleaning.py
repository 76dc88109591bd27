"""The broker's log cleaner: which compacted partition to clean, and when (issue 24).

Storage knows how to clean a partition (:mod:`lkstream.storage.cleaner`); this module
decides when, as Kafka's ``LogCleanerManager`` does. One thread per broker,
``lkstream-cleaner``, repeats:

1. assess every open partition of a compacted topic (``cleanup.policy`` holds
   ``compact``): its dirty ratio, whether a dirty record is older than
   ``max.compaction.lag.ms``, whether a tombstone kept by an earlier pass may go now;
2. clean the *dirtiest* partition that is due (ratio at least
   ``min.cleanable.dirty.ratio``, or overdue, or tombstones due), one pass, with a key
   map of at most ``log_cleaner_dedupe_buffer_bytes``;
3. sleep ``log_cleaner_backoff_ms`` when nothing was due.

A pass holds no broker lock and its partition's lock only to swap a rewritten segment
in; it shares the GIL with the daemon's event loop, so it is paced
(:class:`~lkstream.storage.pacing.Pacer`, ``CLEANER_WORK_S`` of work then
``CLEANER_PAUSE_S`` of sleep). A pass that fails (a damaged batch, a full disk) is
logged, counted, and its partition is left alone for ``FAILED_BACKOFF_S`` (Kafka marks
such a partition uncleanable); the other partitions go on being cleaned.

Thread-safety: :class:`Cleaner` is thread-safe; its state (:meth:`Cleaner.status`,
:attr:`Cleaner.totals`) is read by metrics and ``describe`` while the thread runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Final

from lkstream.errors import LkstreamError
from lkstream.storage.cleaner import CleanerPolicy, Dirtiness, PassStats, assess, clean_pass
from lkstream.storage.clock import Clock
from lkstream.storage.keymap import new_key_map
from lkstream.storage.log import PartitionLog
from lkstream.storage.pacing import Pacer

log = logging.getLogger("lkstream.broker")

#: A partition whose pass failed is not tried again for this long.
FAILED_BACKOFF_S: Final = 600.0
#: The cleaner's pace: this much work, then this much sleep (the GIL goes to the event loop).
CLEANER_WORK_S: Final = 0.004
CLEANER_PAUSE_S: Final = 0.001

#: ``(topic, partition, log)`` of every open partition the cleaner may look at.
Candidates = Callable[[], Iterable[tuple[str, int, PartitionLog]]]
#: The cleaning policy of a topic, or None when it is not compacted.
PolicyFor = Callable[[str], CleanerPolicy | None]


@dataclass
class PartitionCleaning:
    """What the cleaner knows of one partition (``lkstream topics describe``, metrics)."""

    dirty_ratio: float = 0.0
    last_clean_ms: int = -1
    last_duration_s: float = 0.0
    passes: int = 0
    last_error: str = ""
    retry_after: float = 0.0  # monotonic seconds; a failed partition is left alone until then


@dataclass
class CleanerTotals:
    """Counters over every pass since the broker opened (Prometheus: ``lk_cleaner_*``)."""

    passes: int = 0
    failures: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    bytes_removed: int = 0
    records_removed: int = 0
    last_clean_ms: int = -1
    last_duration_s: float = 0.0
    per_pass: list[PassStats] = field(default_factory=list)  # the last few, newest last


_KEPT_PASSES: Final = 16


class Cleaner:
    """Cleans compacted partitions on a thread of its own (see the module docstring)."""

    def __init__(
        self,
        candidates: Candidates,
        policy_for: PolicyFor,
        clock: Clock,
        *,
        budget_bytes: int,
        backoff_ms: int,
        pace: Callable[[], Pacer] = lambda: Pacer(CLEANER_WORK_S, CLEANER_PAUSE_S),
    ) -> None:
        self._candidates = candidates
        self._policy_for = policy_for
        self._clock = clock
        self.budget_bytes = budget_bytes
        self._backoff_s = backoff_ms / 1000.0
        self._pace = pace
        self._lock = threading.Lock()  # a leaf: guards the state below
        self._status: dict[tuple[str, int], PartitionCleaning] = {}
        self.totals = CleanerTotals()
        self._wake = threading.Event()
        self._stop = threading.Event()
        # One pass at a time, whoever asks (the thread, or a caller of run_once): two passes over one
        # partition would write the same .cleaned files.
        self._pass_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- the thread -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lkstream-cleaner", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Look for work now rather than after the backoff (a config changed, a test)."""
        self._wake.set()

    def close(self) -> None:
        """Stop after the pass in progress (a pass is never cut short: its swaps stay whole)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                worked = self.run_once() is not None
            except Exception:  # keep cleaning the other partitions; the error is in the log
                log.exception("the log cleaner failed")
                worked = False
            if not worked:
                self._wake.wait(self._backoff_s)
                self._wake.clear()

    # -- one step ---------------------------------------------------------------------------------

    def run_once(self) -> PassStats | None:
        """Clean the dirtiest due partition once; None when none was due."""
        with self._pass_lock:
            chosen = self._dirtiest()
            if chosen is None:
                return None
            topic, pid, plog, policy = chosen
            return self._clean(topic, pid, plog, policy)

    def _dirtiest(self) -> tuple[str, int, PartitionLog, CleanerPolicy] | None:
        now_ms, now_s = self._clock.now_ms(), time.monotonic()
        best: tuple[float, str, int, PartitionLog, CleanerPolicy] | None = None
        seen: set[tuple[str, int]] = set()
        for topic, pid, plog in self._candidates():
            policy = self._policy_for(topic)
            if policy is None:
                continue
            try:
                dirtiness = assess(plog.cleaning_snapshot(), policy, now_ms)
            except LkstreamError:
                continue  # closed meanwhile (topic deleted)
            seen.add((topic, pid))
            state = self._state(topic, pid, dirtiness)
            if state.retry_after > now_s or not dirtiness.due(policy):
                continue
            if best is None or dirtiness.ratio > best[0]:
                best = (dirtiness.ratio, topic, pid, plog, policy)
        self._forget_others(seen)
        return None if best is None else best[1:]

    def _state(self, topic: str, pid: int, dirtiness: Dirtiness) -> PartitionCleaning:
        with self._lock:
            state = self._status.setdefault((topic, pid), PartitionCleaning())
            state.dirty_ratio = dirtiness.ratio
            return state

    def _forget_others(self, seen: set[tuple[str, int]]) -> None:
        """Drop the state of partitions that are gone or no longer compacted (bounded by live partitions)."""
        with self._lock:
            for key in [key for key in self._status if key not in seen]:
                del self._status[key]

    def _clean(self, topic: str, pid: int, plog: PartitionLog, policy: CleanerPolicy) -> PassStats | None:
        started = time.perf_counter()
        try:
            snapshot = plog.cleaning_snapshot()
            dirty_offsets = max(0, snapshot.active_base - snapshot.clean_end)
            key_map = new_key_map(self.budget_bytes, most_keys=dirty_offsets)
            pacer = self._pace()
            stats = clean_pass(snapshot, policy, key_map, self._clock.now_ms(), plog.replace_segments, pace=pacer.step)
            del key_map  # the table goes back to the system before the next assessment
            plog.set_clean_end(stats.map_end, stats.tombstones_due_ms)
        except LkstreamError as exc:
            self._failed(topic, pid, exc)
            return None
        self._record(topic, pid, stats, time.perf_counter() - started)
        return stats

    def _failed(self, topic: str, pid: int, exc: LkstreamError) -> None:
        log.error("cleaning %s[%d] failed, retrying in %.0f s: %s", topic, pid, FAILED_BACKOFF_S, exc)
        with self._lock:
            state = self._status.setdefault((topic, pid), PartitionCleaning())
            state.last_error = str(exc)
            state.retry_after = time.monotonic() + FAILED_BACKOFF_S
            self.totals.failures += 1

    def _record(self, topic: str, pid: int, stats: PassStats, seconds: float) -> None:
        now_ms = self._clock.now_ms()
        with self._lock:
            state = self._status.setdefault((topic, pid), PartitionCleaning())
            state.last_clean_ms, state.last_duration_s, state.last_error = now_ms, seconds, ""
            state.passes += 1
            totals = self.totals
            totals.passes += 1
            totals.bytes_read += stats.bytes_read
            totals.bytes_written += stats.bytes_written
            totals.bytes_removed += stats.bytes_before - stats.bytes_written
            totals.records_removed += stats.records_read - stats.records_kept
            totals.last_clean_ms, totals.last_duration_s = now_ms, seconds
            totals.per_pass = [*totals.per_pass[-(_KEPT_PASSES - 1) :], stats]
        if stats.groups:
            log.info(
                "cleaned %s[%d] up to offset %d: %d segment group(s), %d -> %d bytes, %d of %d records kept, %.3f s",
                topic,
                pid,
                stats.map_end,
                stats.groups,
                stats.bytes_before,
                stats.bytes_written,
                stats.records_kept,
                stats.records_read,
                seconds,
            )

    # -- what others read ---------------------------------------------------------------------------

    def status(self, topic: str, pid: int) -> PartitionCleaning | None:
        """A copy of what the cleaner knows of ``topic[pid]`` (None: not compacted, or not looked at yet)."""
        with self._lock:
            state = self._status.get((topic, pid))
            return None if state is None else replace(state)

    def statuses(self) -> dict[tuple[str, int], PartitionCleaning]:
        with self._lock:
            return {key: replace(state) for key, state in self._status.items()}

    def snapshot_totals(self) -> CleanerTotals:
        with self._lock:
            return replace(self.totals, per_pass=list(self.totals.per_pass))
