"""The consumer: read topics from a broker, embedded or remote, alone or as a member of a group.

::

    consumer = Consumer(broker, group="strategy-v1", offset_store=OffsetStore(base_dir))
    consumer.subscribe("market.ticks", from_committed=True)
    await consumer.consume("market.ticks", handler)   # handler(pid, offset, record)

``broker`` is an embedded :class:`~lkstream.broker.Broker` or anything that
satisfies :class:`ConsumerSource`, such as the daemon client returned by
``lkstream.connect(address)``: the same code runs against the daemon by
changing that one constructor.

Consumer groups
---------------
With a ``group``, :meth:`Consumer.subscribe` makes the consumer a *member* of
the group (docs/groups.md): the broker's group coordinator splits the
partitions of the subscribed topics among the live members, and the consumer
reads only what it is given. A lone member gets every partition, so the
example above behaves as a standalone consumer until a second process joins.
A background heartbeat thread (:mod:`lkstream.client.membership`) keeps the
member alive and learns of rebalances at once (long-polling heartbeats); the
consumer applies them on its own thread or event loop, inside :meth:`poll`
and :meth:`consume` (which wakes on group changes as well as on data):

* revoked partitions: their positions are committed (fenced with the member
  id and generation; with ``auto_commit=False`` the application commits in
  ``on_revoked`` instead), ``on_revoked(partitions)`` is called, they are
  dropped, and they are released to the coordinator at once so the new owner
  starts;
* assigned partitions: reading starts at the group's committed offset (else
  ``auto_offset_reset``), then ``on_assigned(partitions)`` is called;
* partitions lost because the member was removed (it missed its session
  timeout): dropped without a commit (another member may own them already),
  ``on_revoked`` is called, and the consumer joins again.

Assignors: ``range`` and ``roundrobin`` (eager: every rebalance pauses every
partition) and ``cooperative-sticky`` (only moved partitions pause). With an
``instance_id`` the member is *static*: a restart within the session timeout
takes its old partitions back with no rebalance, and (as in Kafka) ``close``
does not leave the group, so the restart finds its place.

Commits are fenced: a commit of a generation the member no longer holds is
retried after a heartbeat if the member still owns the partitions; otherwise
auto-commit drops it silently and :meth:`Consumer.commit` raises
(:class:`~lkstream.errors.UnknownMemberError`,
:class:`~lkstream.errors.NotPartitionOwnerError`, ...). A committed offset
never moves backward (:class:`~lkstream.errors.OffsetRegressionError`;
operators rewind with ``lkstream groups reset``): auto-commit skips a
partition whose position was seeked below its committed offset.

:meth:`Consumer.assign` is manual assignment *without* group management: the
consumer reads exactly the given partitions and its commits carry no member
id, which the coordinator accepts only while the group has no live member (a
standalone tool, a replay, an operator fix-up). Do not mix ``assign`` and
``subscribe`` in one consumer.

Where the group's offsets live: with an embedded broker, in the broker's
offset store. An ``offset_store`` given for the broker's own data directory
is the same store. One for *another* directory makes a standalone consumer
with private offsets: no group membership, every partition of a subscribed
topic, commits into that store (as before groups existed). With a remote
broker, in the daemon: an ``offset_store`` passed with a remote broker is
*ignored*, with a warning in the log. A source without the group calls (an
older daemon client, a custom :class:`ConsumerSource`) also gives a standalone
consumer.

Delivery is at-least-once: an offset is committed (automatically every
``auto_commit_interval_ms``, before a revoke, on close, or by
:meth:`Consumer.commit`) only after the handler returned for the records
before it, so after a crash or a rebalance the next owner re-reads at most
what was handled since the last commit.

Not thread-safe: use one consumer from one thread or one event loop (the
heartbeat thread only posts instructions; it never touches positions).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable

from lkstream.broker.broker import Broker
from lkstream.broker.groups.coordinator import (
    DEFAULT_ASSIGNOR,
    DEFAULT_REBALANCE_TIMEOUT_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
)
from lkstream.broker.partition import DEFAULT_FETCH_BYTES
from lkstream.client.commits import OffsetCommits
from lkstream.client.fetcher import Fetcher
from lkstream.client.membership import GroupMembership
from lkstream.client.positions import Assignment, OffsetReset
from lkstream.client.rebalance import PartitionsCallback, Rebalancer, call_sync
from lkstream.client.sources import (
    ConsumerSource,
    EmbeddedSource,
    GroupConsumerSource,
    Positions,
    TopicPartition,
    resolve_source,
)
from lkstream.errors import InvalidArgumentError, LkstreamError, OffsetOutOfRangeError
from lkstream.format.codec import Record
from lkstream.storage.names import validate_group
from lkstream.storage.offsets import OffsetStore

log = logging.getLogger("lkstream.consumer")

__all__ = [
    "Consumer",
    "ConsumerSource",
    "GroupConsumerSource",
    "Handler",
    "OffsetReset",
    "PartitionsCallback",
    "Positions",
    "TopicPartition",
]

Handler = Callable[[int, int, Record], Awaitable[object] | object]

#: poll() re-checks the group mailbox at least this often while it waits for data (seconds).
POLL_GROUP_CHECK_S = 0.05
#: After re-subscribing, subscribe() waits at most this long for the new assignment to settle.
RESUBSCRIBE_SETTLE_S = 1.0


def _check_positive(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidArgumentError(f"{name} must be a positive integer (milliseconds), not {value!r}")
    return value


class Consumer:
    """Reads assigned partitions in offset order and commits progress for ``group``.

    ``broker``: an embedded :class:`Broker` or a :class:`ConsumerSource` (e.g. a
    ``RemoteBroker``). ``offset_store`` applies to an embedded broker only; see the
    module docstring. The group options (``assignor``, ``session_timeout_ms``,
    ``rebalance_timeout_ms``, ``heartbeat_interval_ms``, ``instance_id``,
    ``client_id``) and the callbacks ``on_assigned(partitions)`` /
    ``on_revoked(partitions)`` (plain or coroutine functions, called on the
    consumer's thread or loop) apply when :meth:`subscribe` joins a group.

    The roles live in their own modules: :mod:`~lkstream.client.sources` (what it reads
    from), :mod:`~lkstream.client.positions` (the assignment), :mod:`~lkstream.client.fetcher`
    (fetching and decoding), :mod:`~lkstream.client.rebalance` (applying group instructions)
    and :mod:`~lkstream.client.commits` (committing).
    """

    def __init__(
        self,
        broker: Broker | ConsumerSource,
        group: str | None = None,
        offset_store: OffsetStore | None = None,
        *,
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        auto_offset_reset: OffsetReset = "earliest",
        fetch_max_bytes: int = DEFAULT_FETCH_BYTES,
        assignor: str = DEFAULT_ASSIGNOR,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        rebalance_timeout_ms: int = DEFAULT_REBALANCE_TIMEOUT_MS,
        heartbeat_interval_ms: int = 3_000,
        instance_id: str | None = None,
        client_id: str = "",
        on_assigned: PartitionsCallback | None = None,
        on_revoked: PartitionsCallback | None = None,
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest", "error"):
            raise InvalidArgumentError(
                f"auto_offset_reset must be earliest, latest or error, not {auto_offset_reset!r}"
            )
        _check_positive("session_timeout_ms", session_timeout_ms)
        _check_positive("rebalance_timeout_ms", rebalance_timeout_ms)
        _check_positive("heartbeat_interval_ms", heartbeat_interval_ms)
        if heartbeat_interval_ms >= session_timeout_ms:
            raise InvalidArgumentError(
                f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be below session_timeout_ms "
                f"({session_timeout_ms}), or the member expires between heartbeats"
            )
        self.broker = broker
        self.group = None if group is None else validate_group(group)
        self.offset_store: OffsetStore | None
        self.source: ConsumerSource
        self._group_source: GroupConsumerSource | None
        self.offset_store, self.source, self._group_source = resolve_source(broker, offset_store, self.group)
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000.0
        self.auto_offset_reset = auto_offset_reset
        self.assignor = assignor
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.instance_id = instance_id
        self.client_id = client_id
        self._assignment = Assignment(auto_offset_reset)
        self._fetcher = Fetcher(
            self.source,
            self._assignment,
            fetch_max_bytes,
            pipelined=not isinstance(self.source, EmbeddedSource),
        )
        self._commits = OffsetCommits(
            self.group, self.source, self._group_source, self._assignment, lambda: self._membership
        )
        self._rebalancer = Rebalancer(self._assignment, self._fetcher, self._commits, self._start_assigned)
        self.auto_commit = auto_commit and group is not None
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self._stopping = False
        # Raised by stop(), seek() and group instructions: consume()'s handler loop checks it per record.
        self._interrupted = False
        # Group membership (subscribe with a group-capable source) or manual assignment.
        self._membership: GroupMembership | None = None
        self._subscription: dict[str, bool] = {}  # topic -> from_committed
        self._manual = False
        self._sync_wake = threading.Event()
        self._async_wake: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    # -- settings shared with the role objects ----------------------------------------------------

    @property
    def auto_commit(self) -> bool:
        """Whether positions are committed every ``auto_commit_interval_ms``, before a revoke and on close."""
        return self._rebalancer.auto_commit

    @auto_commit.setter
    def auto_commit(self, value: bool) -> None:
        self._rebalancer.auto_commit = value

    @property
    def on_assigned(self) -> PartitionsCallback | None:
        return self._rebalancer.on_assigned

    @on_assigned.setter
    def on_assigned(self, callback: PartitionsCallback | None) -> None:
        self._rebalancer.on_assigned = callback

    @property
    def on_revoked(self) -> PartitionsCallback | None:
        return self._rebalancer.on_revoked

    @on_revoked.setter
    def on_revoked(self, callback: PartitionsCallback | None) -> None:
        self._rebalancer.on_revoked = callback

    @property
    def fetch_max_bytes(self) -> int:
        return self._fetcher.fetch_max_bytes

    @fetch_max_bytes.setter
    def fetch_max_bytes(self, value: int) -> None:
        self._fetcher.fetch_max_bytes = value

    # -- assignment and positions --------------------------------------------------------------

    @property
    def group_managed(self) -> bool:
        """Whether :meth:`subscribe` joins the group (a group and a source with the group calls)."""
        return self._group_source is not None

    @property
    def membership(self) -> GroupMembership | None:
        """The group membership after :meth:`subscribe` (member id, generation), else None."""
        return self._membership

    def subscribe(self, topic: str, *, from_committed: bool = True) -> None:
        """Consume ``topic``: as a group member, what the coordinator assigns; standalone, every partition.

        A partition starts at the group's committed offset; without a commit (or
        with ``from_committed=False``) at ``auto_offset_reset`` (earliest or latest).
        May be called for several topics.
        """
        if self._group_source is None:
            self._take([(topic, pid) for pid in range(self.source.partitions_for(topic))], from_committed)
            return
        if self._manual:
            raise InvalidArgumentError("this consumer uses assign(): manual assignment and subscribe() do not mix")
        self.source.partitions_for(topic)  # an unknown topic fails here, not in the heartbeat thread
        if topic in self._subscription:
            self._subscription[topic] = from_committed
            return
        self._subscription[topic] = from_committed
        if self._membership is None:
            assert self.group is not None
            self._membership = GroupMembership(
                self._group_source,
                self.group,
                self._subscription,
                assignor=self.assignor,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                heartbeat_interval_ms=self.heartbeat_interval_ms,
                instance_id=self.instance_id,
                client_id=self.client_id,
            )
            self._membership.add_listener(self._wake_up)
            self._membership.start()
            self._rebalancer.apply_sync(self._membership)
        else:
            self._membership.update_topics(self._subscription)
            self._settle(RESUBSCRIBE_SETTLE_S)

    def _settle(self, timeout: float) -> None:
        """Apply instructions until this member's assignment is stable or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        while True:
            self._rebalancer.apply_sync(self._membership)
            last = self._rebalancer.last_result
            if last is not None and last.stable:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._sync_wake.wait(remaining)
            self._sync_wake.clear()

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Read exactly these partitions, without group management (see the module docstring)."""
        if self._membership is not None:
            raise InvalidArgumentError("this consumer is a group member (subscribe): assign() does not mix with it")
        self._manual = True
        self._take(partitions, from_committed=True)

    def _take(self, partitions: Iterable[TopicPartition], from_committed: bool) -> None:
        self._assignment.take(self.source, self.group, partitions, from_committed)

    def _start_assigned(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._take([tp], self._subscription.get(tp[0], True))

    def assignment(self) -> list[TopicPartition]:
        """The partitions this consumer reads now (paused ones included)."""
        return sorted(self._assignment.positions)

    def position(self, topic: str, pid: int) -> int:
        """The next offset this consumer will read from ``topic[pid]``."""
        return self._assignment.positions[(topic, pid)]

    def seek(self, topic: str, pid: int, offset: int) -> None:
        """Read ``topic[pid]`` from ``offset`` next; from a :meth:`consume` handler, after the current record."""
        self._assignment.check_assigned([(topic, pid)])
        start, end = self.source.bounds(topic, pid)
        if not start <= offset <= end:
            raise OffsetOutOfRangeError(topic, pid, offset, start, end)
        self._assignment.seek((topic, pid), offset)
        self._fetcher.drop((topic, pid))
        self._interrupted = True

    def committed(self, topic: str, pid: int) -> int | None:
        """The group's committed offset of ``topic[pid]`` (None without a group or a commit)."""
        if self.group is None:
            return None
        return self.source.read_committed(self.group, topic, pid)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop reading ``partitions`` (they stay assigned, and their positions are kept) until :meth:`resume`."""
        parts = list(partitions)
        self._assignment.check_assigned(parts)
        self._assignment.paused.update(parts)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Read paused ``partitions`` again, from where they stopped."""
        parts = list(partitions)
        self._assignment.check_assigned(parts)
        self._assignment.paused.difference_update(parts)
        self._wake_up()

    def paused(self) -> list[TopicPartition]:
        """The paused partitions (a revoked partition is no longer paused: it is no longer assigned)."""
        return sorted(self._assignment.paused)

    def _wake_up(self) -> None:
        """Called by the heartbeat thread (or resume/stop): end the current wait for data, or the handler loop."""
        self._interrupted = True
        self._sync_wake.set()
        waker = self._async_wake
        if waker is not None:
            loop, event = waker
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
                loop.call_soon_threadsafe(event.set)

    # -- reading --------------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0, max_records: int | None = None) -> list[Record]:
        """Records from the assigned partitions, waiting up to ``timeout`` seconds for the first.

        Blocking (for code without an event loop); woken by appends, not by
        polling. As in Kafka, calling ``poll`` means the records of the
        previous ``poll`` were processed: auto-commit, when due, commits the
        positions reached *before* this call, then the positions advance past
        the records returned now. A group member applies rebalances here
        (callbacks run inside ``poll``); while it waits it re-checks the group
        every ``POLL_GROUP_CHECK_S``.
        """
        self._rebalancer.apply_sync(self._membership)
        positions = self._assignment.positions
        if not positions and self._membership is None:
            raise InvalidArgumentError("the consumer has no assigned partitions; call subscribe() first")
        if self.auto_commit and self._commits.due(self.auto_commit_interval_s):
            self._commits.auto_commit()
        records = self._fetcher.read_available(max_records)
        deadline = time.monotonic() + timeout
        while not records and not self._stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            watched = {tp: positions[tp] for tp in self._assignment.readable(None)}
            if self._membership is None and watched:
                self.source.wait_for_data_sync(watched, remaining)
            elif watched:
                self.source.wait_for_data_sync(watched, min(remaining, POLL_GROUP_CHECK_S))
            else:
                self._sync_wake.wait(remaining)
                self._sync_wake.clear()
            self._rebalancer.apply_sync(self._membership)
            records = self._fetcher.read_available(max_records)
        for record in records:
            positions[(record.topic, record.partition)] = record.offset + 1
        return records

    async def _wait(self, topic: str | None, timeout: float | None, wake: asyncio.Event) -> bool:
        """Wait for data on the readable partitions or a group change; False on timeout."""
        if wake.is_set():
            wake.clear()
            return True
        positions = self._assignment.positions
        watched = {tp: positions[tp] for tp in self._assignment.readable(topic)}
        waits: list[asyncio.Future[bool]] = [asyncio.ensure_future(wake.wait())]
        if watched:
            waits.append(asyncio.ensure_future(self.source.wait_for_data(watched, timeout)))
        try:
            done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        wake.clear()
        return any(not w.cancelled() and w.exception() is None and w.result() for w in done)

    async def consume(
        self,
        topic: str | None,
        handler: Handler,
        *,
        max_records: int | None = None,
        idle_timeout: float | None = None,
    ) -> int:
        """Call ``handler(partition, offset, record)`` for each record, in offset order per partition.

        Runs until :meth:`stop` is called, ``max_records`` were handled, or no
        record arrived for ``idle_timeout`` seconds; returns how many records
        were handled. ``handler`` may be a plain function or a coroutine
        function. ``topic`` (optional) restricts the loop to one subscribed
        topic. A group member applies rebalances between reads (the wait for
        data also ends on a group change).
        """
        if topic is not None and not self._has_topic(topic):
            self.subscribe(topic)
        self._stopping = False
        handled = 0
        is_async = inspect.iscoroutinefunction(handler)
        wake = asyncio.Event()
        self._async_wake = (asyncio.get_running_loop(), wake)
        idle_deadline = None if idle_timeout is None else time.monotonic() + idle_timeout
        try:
            while not self._stopping and (max_records is None or handled < max_records):
                await self._rebalancer.apply_async(self._membership)
                budget = None if max_records is None else max_records - handled
                chunks = await self._fetcher.read_available_async(budget, topic)
                if not chunks:
                    await self._maybe_auto_commit_async()
                    remaining = None if idle_deadline is None else idle_deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        break
                    await self._wait(topic, remaining, wake)
                    continue
                if idle_timeout is not None:
                    idle_deadline = time.monotonic() + idle_timeout
                handled += await self._handle(chunks, handler, is_async)
                await self._maybe_auto_commit_async()
        finally:
            self._async_wake = None
            # Read-aheads belong to this event loop; a later consume() may run on another.
            self._fetcher.drop_all()
            if self.auto_commit:
                await asyncio.to_thread(self._commits.auto_commit)
        return handled

    async def _handle(self, chunks: list[tuple[TopicPartition, list[Record]]], handler: Handler, is_async: bool) -> int:
        """Run ``handler`` over one read's records, partition by partition; returns how many were handled.

        A partition's position moves past a record only once its handler returned
        (at-least-once): at the end of its records, or at the record whose handler raised.
        What may stop the loop early (:meth:`stop`, a pending rebalance, a :meth:`seek` from
        the handler) raises one flag, ``_interrupted``, checked after each record; the
        reasons are sorted out only then (:meth:`_interruption`).
        """
        positions = self._assignment.positions
        seeked = self._assignment.seeked
        seeked.clear()
        self._interrupted = False
        handled = 0
        for tp, records in chunks:
            if self._stopping or self._rebalance_pending():
                break  # the rest is read again after the rebalance (positions are per partition)
            if tp in seeked:
                continue  # a handler moved (or lost) this partition: the rest of this read is stale
            pid = tp[1]
            record = records[0]
            try:
                for record in records:
                    result = handler(pid, record[2], record)
                    if result is not None and (is_async or inspect.isawaitable(result)):
                        await result  # type: ignore[misc]
                    if self._interrupted and self._interruption(tp):
                        break
                else:
                    positions[tp] = record[2] + 1
                    handled += len(records)
                    continue
            except BaseException:
                if tp not in seeked:
                    positions[tp] = record[2]  # the records before it were handled; this one was not
                raise
            # interrupted after `record`: it was handled, the ones after it were not
            if tp not in seeked:
                positions[tp] = record[2] + 1
            handled += records.index(record) + 1
        return handled

    def _rebalance_pending(self) -> bool:
        membership = self._membership
        return membership is not None and membership.has_pending()

    def _interruption(self, tp: TopicPartition) -> bool:
        """After a handler returned with ``_interrupted`` raised: stop this partition's records?"""
        self._interrupted = False
        return self._stopping or self._rebalance_pending() or tp in self._assignment.seeked

    def _has_topic(self, topic: str) -> bool:
        return topic in self._subscription or any(t == topic for t, _ in self._assignment.positions)

    def stop(self) -> None:
        """Make :meth:`consume` (or a waiting :meth:`poll`) return after the record being handled."""
        self._stopping = True
        self._wake_up()

    # -- committing -----------------------------------------------------------------------------

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Durably commit ``offsets`` (default: the current positions) for the group.

        Never applies a rebalance: partitions the coordinator asked this member to revoke
        are still its own until the next :meth:`poll` or :meth:`consume` releases them,
        so their handled records are committed too ("commit before revoke").
        A group member's commit is fenced; it raises when the member lost the
        partitions (:class:`~lkstream.errors.UnknownMemberError`,
        :class:`~lkstream.errors.NotPartitionOwnerError`) or the offset would
        move backward (:class:`~lkstream.errors.OffsetRegressionError`).
        """
        if self.group is None:
            raise InvalidArgumentError("commit needs a consumer group (group=...)")
        # No group instructions are applied here (issue 12, finding 12): a pending revocation is
        # applied by the next poll()/consume(), as in Kafka's clients. Applying it first would drop
        # the positions the application just handled and hand those records to the next owner again.
        self._commits.commit_now(dict(self._assignment.positions) if offsets is None else offsets)

    async def _maybe_auto_commit_async(self) -> None:
        if self.auto_commit and self._commits.due(self.auto_commit_interval_s):
            # Offset files are fsynced (a remote commit is a round trip): keep that off the event loop.
            await asyncio.to_thread(self._commits.auto_commit)

    def close(self, *, leave: bool | None = None) -> None:
        """Commit (when auto-commit is on), leave the group and forget the assignment.

        ``leave`` defaults to True for a dynamic member (its partitions move at
        once) and False for a static one (``instance_id``: a restart within the
        session timeout gets its partitions back without a rebalance).
        """
        self._fetcher.drop_all()
        membership = self._membership
        if membership is None:
            if self.auto_commit:
                self._commits.auto_commit()
            self._assignment.positions.clear()
            return
        membership.stop()
        try:
            self._rebalancer.apply_sync(membership)  # a revoke that arrived last is honoured (commit before release)
        except LkstreamError as exc:
            log.info("group %r: closing after %s", self.group, exc)
        if self.auto_commit:
            self._commits.auto_commit()
        held = sorted(self._assignment.positions)
        self._rebalancer.forget(held)
        if held:
            call_sync(self.on_revoked, held)
        if self.instance_id is None if leave is None else leave:
            membership.leave()
        self._membership = None
        self._subscription.clear()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
