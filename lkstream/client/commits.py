"""Committing a consumer's offsets: fenced for a group member, plain otherwise.

:class:`OffsetCommits` writes the positions the consumer hands it and records them as
committed in the :class:`~lkstream.client.positions.Assignment`. Three cases, as the
consumer's module docstring explains: a group member's commit is fenced with its member
id and generation (a stale generation is retried once for the partitions still owned);
a manually assigned consumer commits without a member id; a standalone consumer (a
private offset store, or a source without group calls) commits partition by partition.
Strict commits (:meth:`Consumer.commit`) raise; automatic ones log and drop a refusal,
because the next owner re-reads from the last commit anyway (at-least-once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from lkstream.client.membership import GroupMembership
from lkstream.client.positions import Assignment
from lkstream.client.sources import ConsumerSource, GroupConsumerSource, TopicPartition
from lkstream.errors import GroupError, LkstreamError, NotPartitionOwnerError, StaleGenerationError

log = logging.getLogger("lkstream.consumer")


class OffsetCommits:
    """Commits for ``group`` through ``source`` / ``group_source``; ``membership()`` is the current member or None."""

    def __init__(
        self,
        group: str | None,
        source: ConsumerSource,
        group_source: GroupConsumerSource | None,
        assignment: Assignment,
        membership: Callable[[], GroupMembership | None],
    ) -> None:
        self.group = group
        self.source = source
        self.group_source = group_source
        self.assignment = assignment
        self._membership = membership
        #: When the last commit (automatic or not) ended, on the monotonic clock.
        self.last_commit = time.monotonic()

    def due(self, interval_s: float) -> bool:
        return time.monotonic() - self.last_commit >= interval_s

    def commit_now(self, offsets: Mapping[TopicPartition, int]) -> None:
        """A strict commit of the offsets not yet known committed (:meth:`Consumer.commit`)."""
        self.commit(self.assignment.pending(offsets), strict=True)
        self.last_commit = time.monotonic()

    def auto_commit(self) -> None:
        """Commit the positions; a refused commit is logged and dropped (the next owner re-reads)."""
        if self.group is None:
            return
        offsets = self.assignment.advanced(self.assignment.positions)
        try:
            self.commit(offsets, strict=False)
        finally:
            self.last_commit = time.monotonic()

    def commit_revoking(self, partitions: list[TopicPartition]) -> None:
        """Commit before revoke: what was handled in ``partitions`` stays handled for the next owner."""
        positions = self.assignment.positions
        offsets = self.assignment.advanced({tp: positions[tp] for tp in partitions if tp in positions})
        if offsets:
            self.commit_group(offsets, strict=False)

    def commit(self, offsets: Mapping[TopicPartition, int], *, strict: bool) -> None:
        if not offsets:
            return
        assert self.group is not None
        if self._membership() is not None:
            self.commit_group(dict(offsets), strict=strict)
        elif self.group_source is not None:
            # Manual assignment: no member id; the coordinator accepts it only while the group has no live member.
            self.group_source.commit_offsets(self.group, offsets)
            self.assignment.committed.update(offsets)
        else:
            for (topic, pid), offset in offsets.items():
                self.source.commit_offset(self.group, topic, pid, offset)
                self.assignment.committed[(topic, pid)] = offset

    def commit_group(self, offsets: dict[TopicPartition, int], *, strict: bool) -> None:
        """A fenced commit; a stale generation is retried once after a heartbeat for what is still owned."""
        membership = self._membership()
        source = self.group_source
        assert membership is not None and source is not None and self.group is not None
        try:
            try:
                source.commit_offsets(
                    self.group, offsets, member_id=membership.member_id, generation=membership.generation
                )
            except StaleGenerationError:
                # A rebalance happened since our last heartbeat. Learn the generation (the answer is not
                # applied here: only the heartbeat thread's answers are, in order) and keep what we still own.
                answer = source.heartbeat(self.group, membership.member_id, None)
                still = {tp: o for tp, o in offsets.items() if tp in answer.owned}
                gone = sorted(set(offsets) - set(still))
                if still:
                    source.commit_offsets(
                        self.group, still, member_id=membership.member_id, generation=answer.generation
                    )
                    self.assignment.committed.update(still)
                membership.poke()
                if gone:
                    raise NotPartitionOwnerError(self.group, membership.member_id, gone) from None
                return
        except GroupError as exc:
            if strict:
                raise
            log.info("group %r: auto-commit of %d partition(s) dropped: %s", self.group, len(offsets), exc)
            return
        except LkstreamError as exc:
            if strict:
                raise
            log.warning("group %r: auto-commit failed: %s", self.group, exc)
            return
        self.assignment.committed.update(offsets)
