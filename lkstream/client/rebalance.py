"""Applying a group's instructions on the consumer's own thread or event loop.

The heartbeat thread (:mod:`lkstream.client.membership`) only posts instructions;
:class:`Rebalancer` applies them inside ``poll()`` / ``consume()`` so that handlers,
commits and the ``on_assigned`` / ``on_revoked`` callbacks never race with reads
(docs/groups.md, and "Rebalances only where the application expects them"):

* lost partitions (the member was removed): dropped without a commit, ``on_revoked``;
* revoked partitions: committed first (with auto-commit), ``on_revoked``, dropped,
  then released to the coordinator at once so the new owner starts;
* assigned partitions: started at the group's committed offset, ``on_assigned``.

The async face runs commits and the reads of starting offsets in a worker thread:
they fsync a file or make a round trip.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

from lkstream.broker.groups.types import HeartbeatResult
from lkstream.client.commits import OffsetCommits
from lkstream.client.fetcher import Fetcher
from lkstream.client.membership import GroupMembership, Instructions
from lkstream.client.positions import Assignment
from lkstream.client.sources import TopicPartition
from lkstream.errors import InvalidArgumentError

PartitionsCallback = Callable[[list[TopicPartition]], Awaitable[object] | object]
Plan = tuple[list[TopicPartition], list[TopicPartition], list[TopicPartition], list[TopicPartition]]


class Rebalancer:
    """Applies :class:`Instructions` to ``assignment``; ``start_assigned`` starts reading new partitions."""

    def __init__(
        self,
        assignment: Assignment,
        fetcher: Fetcher,
        commits: OffsetCommits,
        start_assigned: Callable[[list[TopicPartition]], None],
    ) -> None:
        self.assignment = assignment
        self.fetcher = fetcher
        self.commits = commits
        self.start_assigned = start_assigned
        self.auto_commit = False
        self.on_assigned: PartitionsCallback | None = None
        self.on_revoked: PartitionsCallback | None = None
        #: The newest heartbeat answer applied (``stable`` tells when an assignment has settled).
        self.last_result: HeartbeatResult | None = None

    def forget(self, partitions: list[TopicPartition]) -> None:
        self.assignment.forget(partitions)
        for tp in partitions:
            self.fetcher.drop(tp)

    def plan(self, ins: Instructions) -> Plan:
        """(lost, revoke, release, assign) from the current assignment and ``ins``."""
        current = set(self.assignment.positions)
        lost: set[TopicPartition] = set(current) if ins.lost else set()
        revoke: set[TopicPartition] = set()
        release: set[TopicPartition] = set()
        assign: set[TopicPartition] = set()
        result = ins.result
        if result is not None:
            self.last_result = result
            held = current - lost
            lost |= held - result.owned  # taken from us (removed, fenced): never commit them
            revoke = held & set(result.revoke)
            release |= result.revoke  # including any we do not read: never granted to us for reading
            assign = set(result.owned - result.revoke) - held
        return sorted(lost), sorted(revoke), sorted(release), sorted(assign)

    def _commit_revoking(self, partitions: list[TopicPartition]) -> None:
        if self.auto_commit:  # with manual commits the application commits in on_revoked if it wants to
            self.commits.commit_revoking(partitions)

    def apply_sync(self, membership: GroupMembership | None) -> None:
        if membership is None:
            return
        ins = membership.take()
        if ins is None:
            return
        if ins.fatal is not None:
            raise ins.fatal
        lost, revoke, release, assign = self.plan(ins)
        if lost:
            self.forget(lost)
            call_sync(self.on_revoked, lost)
        if revoke:
            self._commit_revoking(revoke)
            call_sync(self.on_revoked, revoke)
            self.forget(revoke)
        if release:
            membership.release(release)
        if assign:
            self.start_assigned(assign)
            call_sync(self.on_assigned, assign)

    async def apply_async(self, membership: GroupMembership | None) -> None:
        if membership is None:
            return
        ins = membership.take()
        if ins is None:
            return
        if ins.fatal is not None:
            raise ins.fatal
        lost, revoke, release, assign = self.plan(ins)
        if lost:
            self.forget(lost)
            await call_async(self.on_revoked, lost)
        if revoke:
            # A commit is an fsync or a round trip: off the event loop.
            await asyncio.to_thread(self._commit_revoking, revoke)
            await call_async(self.on_revoked, revoke)
            self.forget(revoke)
        if release:
            membership.release(release)
        if assign:
            await asyncio.to_thread(self.start_assigned, assign)
            await call_async(self.on_assigned, assign)


def call_sync(callback: PartitionsCallback | None, partitions: list[TopicPartition]) -> None:
    if callback is None:
        return
    result = callback(partitions)
    if inspect.isawaitable(result):
        raise InvalidArgumentError("a coroutine on_assigned/on_revoked callback needs consume(), not poll()")


async def call_async(callback: PartitionsCallback | None, partitions: list[TopicPartition]) -> None:
    if callback is None:
        return
    result = callback(partitions)
    if inspect.isawaitable(result):
        await result
