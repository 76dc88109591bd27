"""The embedded broker's background upkeep: retention, segment.ms rolls, producer expiry, group ticks.

:class:`Maintenance` is a mixin of :class:`~lkstream.broker.broker.Broker`. Its loops run
on the broker's own threads (``lkstream-retention``, ``lkstream-groups``) and survive any
one pass failing (the error is logged). The cleaner's view of topics lives here too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from lkstream.errors import BrokerClosedError
from lkstream.storage.cleaner import CleanerPolicy

if TYPE_CHECKING:
    from lkstream.broker.cleaning import Cleaner, PartitionCleaning
    from lkstream.broker.topics import OpenTopic
    from lkstream.config import BrokerConfig
    from lkstream.storage.log import PartitionLog

log = logging.getLogger("lkstream.broker")

#: How often the broker expires group members that stopped heartbeating (session timeouts are seconds).
GROUP_TICK_S = 0.2


class Maintenance:
    """Mixin of :class:`~lkstream.broker.broker.Broker`: the periodic work of its background threads."""

    # The broker's state this mixin works on (Broker.__init__ sets every one).
    config: BrokerConfig
    _lock: threading.RLock
    _topics: dict[str, OpenTopic]
    _stop_maintenance: threading.Event
    cleaner: Cleaner | None

    if TYPE_CHECKING:
        # Defined by the group mixin; declared only for the type checker (no shadowing in the MRO).
        def tick_groups(self) -> None: ...

    def enforce_retention(self) -> int:
        """Run retention on every partition now; return how many segments were deleted."""
        with self._lock:
            partitions = [p for t in self._topics.values() for p in t.partitions.opened()]
        deleted = 0
        for partition in partitions:
            try:
                deleted += len(partition.log.enforce_retention())
            except BrokerClosedError:
                continue  # deleted concurrently
        return deleted

    def roll_quiet_partitions(self) -> int:
        """Seal every active segment that held data for its ``segment.ms`` (the retention thread's job)."""
        rolled = 0
        for topic in list(self._topics.values()):
            for partition in topic.partitions.opened():
                rolled += partition.roll_if_due()
        return rolled

    def _open_logs(self) -> Iterator[tuple[str, int, PartitionLog]]:
        """``(topic, partition, log)`` of every open partition (a never-used one holds nothing)."""
        for topic in list(self._topics.values()):
            for partition in topic.partitions.opened():
                yield topic.name, partition.pid, partition.log

    def _cleaner_policy(self, topic: str) -> CleanerPolicy | None:
        """How the cleaner treats ``topic``: None unless its ``cleanup.policy`` holds ``compact``."""
        found = self._topics.get(topic)
        if found is None or not found.effective.compact:
            return None
        e = found.effective
        return CleanerPolicy(
            delete_retention_ms=e.delete_retention_ms,
            min_compaction_lag_ms=e.min_compaction_lag_ms,
            max_compaction_lag_ms=e.max_compaction_lag_ms,
            min_cleanable_dirty_ratio=e.min_cleanable_dirty_ratio,
            max_decompressed_bytes=self.config.max_decompressed_bytes,
        )

    def _wake_cleaner(self) -> None:
        if self.cleaner is not None:
            self.cleaner.wake()

    def cleaner_status(self, topic: str, pid: int) -> PartitionCleaning | None:
        """What the cleaner knows of ``topic[pid]``: dirty ratio, last clean (None: not compacted, or not yet seen)."""
        return None if self.cleaner is None else self.cleaner.status(topic, pid)

    def expire_producers(self) -> int:
        """Forget idempotent producers silent for ``producer_id_expiration_ms`` in every open partition."""
        with self._lock:
            partitions = [p for t in self._topics.values() for p in t.partitions.opened()]
        expired = 0
        for partition in partitions:
            expired += partition.log.expire_producers()
        return expired

    def _tick_groups(self) -> None:
        while not self._stop_maintenance.wait(GROUP_TICK_S):
            try:
                self.tick_groups()
            except Exception:  # keep expiring members; the error is in the log
                log.exception("group coordinator tick failed")

    def _maintain(self) -> None:
        interval = self.config.retention_check_interval_ms / 1000.0
        while not self._stop_maintenance.wait(interval):
            try:
                self.enforce_retention()
                # A quiet partition's tail becomes cleanable (and deletable) only once it is sealed.
                self.roll_quiet_partitions()
            except Exception:  # keep retention alive; the error is in the log
                log.exception("retention failed")
            try:
                self.expire_producers()
            except Exception:  # keep the maintenance loop alive; the error is in the log
                log.exception("expiring idempotent producers failed")
