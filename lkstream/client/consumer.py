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
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Literal, Protocol, runtime_checkable

from lkstream.broker.broker import Broker
from lkstream.broker.groups.coordinator import (
    DEFAULT_ASSIGNOR,
    DEFAULT_REBALANCE_TIMEOUT_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
)
from lkstream.broker.groups.types import HeartbeatResult
from lkstream.broker.partition import DEFAULT_FETCH_BYTES
from lkstream.client.membership import GroupMembership, GroupSource, Instructions
from lkstream.errors import (
    GroupError,
    InvalidArgumentError,
    LkstreamError,
    NotPartitionOwnerError,
    OffsetOutOfRangeError,
    StaleGenerationError,
)
from lkstream.format.batch import span_of_whole_batches
from lkstream.format.codec import Record, decode_batches
from lkstream.storage.log import ReadResult
from lkstream.storage.names import validate_group
from lkstream.storage.offsets import OffsetStore

log = logging.getLogger("lkstream.consumer")

Handler = Callable[[int, int, Record], Awaitable[object] | object]
TopicPartition = tuple[str, int]
OffsetReset = Literal["earliest", "latest", "error"]
Positions = dict[TopicPartition, int]
PartitionsCallback = Callable[[list[TopicPartition]], Awaitable[object] | object]

#: poll() re-checks the group mailbox at least this often while it waits for data (seconds).
POLL_GROUP_CHECK_S = 0.05
#: After re-subscribing, subscribe() waits at most this long for the new assignment to settle.
RESUBSCRIBE_SETTLE_S = 1.0


@runtime_checkable
class ConsumerSource(Protocol):
    """What a :class:`Consumer` needs from a broker: reads, wake-ups and the group's offsets.

    :class:`~lkstream.client.remote.RemoteBroker` satisfies it directly; an embedded
    :class:`~lkstream.broker.Broker` is adapted (with its offset store) by the consumer.
    Group membership additionally needs ``join_group``, ``heartbeat``,
    ``leave_group`` and ``commit_offsets`` (:class:`GroupConsumerSource`).
    """

    def partitions_for(self, topic: str) -> int:
        """Partition count of ``topic`` (UnknownTopicError if it does not exist)."""
        ...

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """``(log_start_offset, high_watermark)`` (InvalidArgumentError for a missing partition)."""
        ...

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = ...) -> ReadResult:
        """Whole record batches from ``offset`` (OffsetOutOfRangeError outside the log)."""
        ...

    async def fetch_async(self, topic: str, partition: int, offset: int, max_bytes: int = ...) -> ReadResult:
        """Async twin of :meth:`fetch`."""
        ...

    async def wait_for_data(self, positions: Positions, timeout: float | None = None) -> bool:
        """Wait until any partition has a record at or past its position; False on timeout. No polling."""
        ...

    def wait_for_data_sync(self, positions: Positions, timeout: float | None = None) -> bool:
        """Blocking twin of :meth:`wait_for_data`."""
        ...

    def read_committed(self, group: str, topic: str, partition: int) -> int | None:
        """The group's committed offset, or None if it never committed."""
        ...

    def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Durably record that ``group`` will next read ``offset``."""
        ...


class GroupConsumerSource(GroupSource, Protocol):
    """The group calls of a source (embedded Broker, RemoteBroker) a group member needs."""

    def commit_offsets(
        self,
        group: str,
        offsets: Mapping[TopicPartition, int],
        *,
        member_id: str | None = None,
        generation: int | None = None,
    ) -> None: ...


class _EmbeddedSource:
    """An embedded :class:`Broker` plus an :class:`OffsetStore`, seen as a :class:`ConsumerSource`."""

    def __init__(self, broker: Broker, offset_store: OffsetStore) -> None:
        self.broker = broker
        self.offset_store = offset_store

    def partitions_for(self, topic: str) -> int:
        return self.broker.partitions_for(topic)

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        p = self.broker.partition(topic, partition)
        return p.log_start_offset, p.high_watermark

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES) -> ReadResult:
        return self.broker.fetch(topic, partition, offset, max_bytes)

    async def fetch_async(
        self, topic: str, partition: int, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES
    ) -> ReadResult:
        # An embedded read is a page-cache copy of microseconds: inline, as the broker's async API does.
        return self.broker.fetch(topic, partition, offset, max_bytes)

    async def wait_for_data(self, positions: Positions, timeout: float | None = None) -> bool:
        return await self.broker.wait_for_data(positions, timeout)

    def wait_for_data_sync(self, positions: Positions, timeout: float | None = None) -> bool:
        return self.broker.wait_for_data_sync(positions, timeout)

    def read_committed(self, group: str, topic: str, partition: int) -> int | None:
        # Only this incarnation's offset: a topic deleted and created again starts afresh.
        return self.offset_store.read_committed(group, topic, partition, topic_id=self.broker.topic_id(topic))

    def commit_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        # A private store knows nothing of the log: the broker refuses offsets past its end here.
        self.broker.check_commit(topic, partition, offset)
        self.offset_store.commit(group, topic, partition, offset, topic_id=self.broker.topic_id(topic))


def _supports_groups(source: object) -> bool:
    return all(
        callable(getattr(source, name, None)) for name in ("join_group", "heartbeat", "leave_group", "commit_offsets")
    )


def _same_directory(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _resolve_source(
    broker: Broker | ConsumerSource, offset_store: OffsetStore | None, group: str | None
) -> tuple[OffsetStore | None, ConsumerSource, GroupConsumerSource | None]:
    """(offset store, read source, group source or None for a standalone consumer); see the module docstring."""
    if isinstance(broker, Broker):
        own_store = offset_store is None or _same_directory(offset_store.directory, broker.offset_store.directory)
        # The broker's own directory means the broker's store (one journal writer per directory).
        store = broker.offset_store if own_store or offset_store is None else offset_store
        group_source: GroupConsumerSource | None = broker if own_store and group is not None else None
        return store, _EmbeddedSource(broker, store), group_source
    if isinstance(broker, ConsumerSource):
        if offset_store is not None:
            log.warning(
                "offset_store is ignored with a remote broker: group %r commits its offsets in the daemon", group
            )
        remote_groups = broker if group is not None and _supports_groups(broker) else None
        return None, broker, remote_groups  # type: ignore[return-value]
    raise InvalidArgumentError(
        f"Consumer needs a Broker or a ConsumerSource (e.g. lkstream.connect(...)), not {type(broker).__name__}"
    )


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
        self.offset_store, self.source, self._group_source = _resolve_source(broker, offset_store, self.group)
        self.auto_commit = auto_commit and group is not None
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000.0
        self.auto_offset_reset = auto_offset_reset
        self.fetch_max_bytes = fetch_max_bytes
        self.assignor = assignor
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.instance_id = instance_id
        self.client_id = client_id
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self._positions: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()
        self._last_commit = time.monotonic()
        self._stopping = False
        # Partitions seeked since consume() read its current records (seek from a handler).
        self._seeked: set[TopicPartition] = set()
        # Remote reads only: offset -> in-flight fetch of the range after the last one read.
        self._pipelined = not isinstance(self.source, _EmbeddedSource)
        self._read_ahead: dict[TopicPartition, tuple[int, asyncio.Future[ReadResult]]] = {}
        # Group membership (subscribe with a group-capable source) or manual assignment.
        self._membership: GroupMembership | None = None
        self._subscription: dict[str, bool] = {}  # topic -> from_committed
        self._manual = False
        self._last_result: HeartbeatResult | None = None
        self._sync_wake = threading.Event()
        self._async_wake: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

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
            self._apply_group_sync()
        else:
            self._membership.update_topics(self._subscription)
            self._settle(RESUBSCRIBE_SETTLE_S)

    def _settle(self, timeout: float) -> None:
        """Apply instructions until this member's assignment is stable or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        while True:
            self._apply_group_sync()
            if self._last_result is not None and self._last_result.stable:
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
        for topic, pid in partitions:
            start = None
            if from_committed and self.group is not None:
                start = self.source.read_committed(self.group, topic, pid)
                if start is not None:
                    self._committed[(topic, pid)] = start
            # _valid_start asks for the partition's bounds, which also proves it exists.
            self._positions[(topic, pid)] = self._valid_start(topic, pid, start)

    def assignment(self) -> list[TopicPartition]:
        """The partitions this consumer reads now (paused ones included)."""
        return sorted(self._positions)

    def _valid_start(self, topic: str, pid: int, wanted: int | None) -> int:
        start, end = self.source.bounds(topic, pid)
        if wanted is not None and start <= wanted <= end:
            return wanted
        if wanted is not None:
            if self.auto_offset_reset == "error":
                raise OffsetOutOfRangeError(topic, pid, wanted, start, end)
            log.warning(
                "%s[%d]: committed offset %d is outside [%d, %d]; resetting to %s",
                topic,
                pid,
                wanted,
                start,
                end,
                self.auto_offset_reset,
            )
        return start if self.auto_offset_reset == "earliest" else end

    def position(self, topic: str, pid: int) -> int:
        """The next offset this consumer will read from ``topic[pid]``."""
        return self._positions[(topic, pid)]

    def seek(self, topic: str, pid: int, offset: int) -> None:
        """Read ``topic[pid]`` from ``offset`` next; from a :meth:`consume` handler, after the current record."""
        self._check_assigned([(topic, pid)])
        start, end = self.source.bounds(topic, pid)
        if not start <= offset <= end:
            raise OffsetOutOfRangeError(topic, pid, offset, start, end)
        self._positions[(topic, pid)] = offset
        self._seeked.add((topic, pid))
        self._read_ahead.pop((topic, pid), None)

    def committed(self, topic: str, pid: int) -> int | None:
        """The group's committed offset of ``topic[pid]`` (None without a group or a commit)."""
        if self.group is None:
            return None
        return self.source.read_committed(self.group, topic, pid)

    def _check_assigned(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            if tp not in self._positions:
                raise InvalidArgumentError(f"{tp[0]}[{tp[1]}] is not assigned to this consumer")

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop reading ``partitions`` (they stay assigned, and their positions are kept) until :meth:`resume`."""
        parts = list(partitions)
        self._check_assigned(parts)
        self._paused.update(parts)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Read paused ``partitions`` again, from where they stopped."""
        parts = list(partitions)
        self._check_assigned(parts)
        self._paused.difference_update(parts)
        self._wake_up()

    def paused(self) -> list[TopicPartition]:
        """The paused partitions (a revoked partition is no longer paused: it is no longer assigned)."""
        return sorted(self._paused)

    # -- applying group instructions (on the consumer's thread) ----------------------------------

    def _wake_up(self) -> None:
        """Called by the heartbeat thread (or resume/stop): end the current wait for data."""
        self._sync_wake.set()
        waker = self._async_wake
        if waker is not None:
            loop, event = waker
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
                loop.call_soon_threadsafe(event.set)

    def _plan(
        self, ins: Instructions
    ) -> tuple[list[TopicPartition], list[TopicPartition], list[TopicPartition], list[TopicPartition]]:
        """(lost, revoke, release, assign) from the current assignment and ``ins``."""
        current = set(self._positions)
        lost: set[TopicPartition] = set(current) if ins.lost else set()
        revoke: set[TopicPartition] = set()
        release: set[TopicPartition] = set()
        assign: set[TopicPartition] = set()
        result = ins.result
        if result is not None:
            self._last_result = result
            held = current - lost
            lost |= held - result.owned  # taken from us (removed, fenced): never commit them
            revoke = held & set(result.revoke)
            release |= result.revoke  # including any we do not read: never granted to us for reading
            assign = set(result.owned - result.revoke) - held
        return sorted(lost), sorted(revoke), sorted(release), sorted(assign)

    def _apply_group_sync(self) -> None:
        membership = self._membership
        if membership is None:
            return
        ins = membership.take()
        if ins is None:
            return
        if ins.fatal is not None:
            raise ins.fatal
        lost, revoke, release, assign = self._plan(ins)
        if lost:
            self._forget(lost)
            _call_sync(self.on_revoked, lost)
        if revoke:
            self._commit_revoking(revoke)
            _call_sync(self.on_revoked, revoke)
            self._forget(revoke)
        if release:
            membership.release(release)
        if assign:
            self._start_assigned(assign)
            _call_sync(self.on_assigned, assign)

    async def _apply_group_async(self) -> None:
        membership = self._membership
        if membership is None:
            return
        ins = membership.take()
        if ins is None:
            return
        if ins.fatal is not None:
            raise ins.fatal
        lost, revoke, release, assign = self._plan(ins)
        if lost:
            self._forget(lost)
            await _call_async(self.on_revoked, lost)
        if revoke:
            # A commit is an fsync or a round trip: off the event loop.
            await asyncio.to_thread(self._commit_revoking, revoke)
            await _call_async(self.on_revoked, revoke)
            self._forget(revoke)
        if release:
            membership.release(release)
        if assign:
            await asyncio.to_thread(self._start_assigned, assign)
            await _call_async(self.on_assigned, assign)

    def _forget(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._positions.pop(tp, None)
            self._committed.pop(tp, None)
            self._paused.discard(tp)
            self._seeked.add(tp)  # records of it already read in this round must not be handled
            ahead = self._read_ahead.pop(tp, None)
            if ahead is not None:
                _discard(ahead[1])

    def _start_assigned(self, partitions: list[TopicPartition]) -> None:
        by_topic = [(tp, self._subscription.get(tp[0], True)) for tp in partitions]
        for tp, from_committed in by_topic:
            self._take([tp], from_committed)

    def _commit_revoking(self, partitions: list[TopicPartition]) -> None:
        """Commit before revoke: what was handled in ``partitions`` stays handled for the next owner."""
        if not self.auto_commit:
            return  # manual commit: the application commits in on_revoked if it wants to
        offsets = self._advanced({tp: self._positions[tp] for tp in partitions if tp in self._positions})
        if offsets:
            self._commit_group(offsets, strict=False)

    # -- reading --------------------------------------------------------------------------------

    def _fetch(self, tp: TopicPartition, max_records: int | None) -> list[Record]:
        topic, pid = tp
        position = self._positions[tp]
        try:
            result = self.source.fetch(topic, pid, position, self.fetch_max_bytes)
        except OffsetOutOfRangeError as exc:
            return self._reset(tp, exc)
        return decode_batches(result.data, topic, pid, position, max_records)

    async def _fetch_async(self, tp: TopicPartition, max_records: int | None) -> list[Record]:
        topic, pid = tp
        position = self._positions[tp]
        try:
            result = await self._fetch_ahead_or_now(tp, position)
        except OffsetOutOfRangeError as exc:
            return self._reset(tp, exc)
        if self._pipelined and tp in self._positions:
            # Ask for the next range before decoding this one, so the daemon reads and
            # sends it while this process decodes (two processes, two cores). The next
            # offset comes from batch headers; a seek or a short handler run just
            # discards the read-ahead.
            _, next_offset = span_of_whole_batches(result.data, position)
            if position < next_offset < result.high_watermark:
                read = self.source.fetch_async(topic, pid, next_offset, self.fetch_max_bytes)
                self._read_ahead[tp] = (next_offset, asyncio.ensure_future(read))
        return decode_batches(result.data, topic, pid, position, max_records)

    async def _fetch_ahead_or_now(self, tp: TopicPartition, position: int) -> ReadResult:
        ahead = self._read_ahead.pop(tp, None)
        if ahead is not None:
            offset, read = ahead
            if offset == position:
                return await read
            _discard(read)
        return await self.source.fetch_async(tp[0], tp[1], position, self.fetch_max_bytes)

    def _drop_read_ahead(self) -> None:
        for _, read in self._read_ahead.values():
            _discard(read)
        self._read_ahead.clear()

    def _reset(self, tp: TopicPartition, exc: OffsetOutOfRangeError) -> list[Record]:
        if self.auto_offset_reset == "error":
            raise exc
        self._positions[tp] = exc.earliest if self.auto_offset_reset == "earliest" else exc.latest
        log.warning("%s; resetting %s[%d] to %d", exc, tp[0], tp[1], self._positions[tp])
        return []

    def _readable(self, topic: str | None) -> list[TopicPartition]:
        return [tp for tp in self._positions if tp not in self._paused and (topic is None or tp[0] == topic)]

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
        self._apply_group_sync()
        if not self._positions and self._membership is None:
            raise InvalidArgumentError("the consumer has no assigned partitions; call subscribe() first")
        if self.auto_commit and time.monotonic() - self._last_commit >= self.auto_commit_interval_s:
            self._auto_commit()
        records = self._read_available(max_records)
        deadline = time.monotonic() + timeout
        while not records and not self._stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            watched = {tp: self._positions[tp] for tp in self._readable(None)}
            if self._membership is None and watched:
                self.source.wait_for_data_sync(watched, remaining)
            elif watched:
                self.source.wait_for_data_sync(watched, min(remaining, POLL_GROUP_CHECK_S))
            else:
                self._sync_wake.wait(remaining)
                self._sync_wake.clear()
            self._apply_group_sync()
            records = self._read_available(max_records)
        for record in records:
            self._positions[(record.topic, record.partition)] = record.offset + 1
        return records

    def _read_available(self, max_records: int | None, topic: str | None = None) -> list[Record]:
        """Records past the current positions, without moving the positions."""
        out: list[Record] = []
        for tp in self._readable(topic):
            budget = None if max_records is None else max_records - len(out)
            if budget == 0:
                break
            out.extend(self._fetch(tp, budget))
        return out

    async def _read_available_async(self, max_records: int | None, topic: str | None) -> list[Record]:
        """Async twin of :meth:`_read_available` (a remote fetch does not block the event loop)."""
        out: list[Record] = []
        for tp in self._readable(topic):
            budget = None if max_records is None else max_records - len(out)
            if budget == 0:
                break
            out.extend(await self._fetch_async(tp, budget))
        return out

    async def _wait(self, topic: str | None, timeout: float | None, wake: asyncio.Event) -> bool:
        """Wait for data on the readable partitions or a group change; False on timeout."""
        if wake.is_set():
            wake.clear()
            return True
        watched = {tp: self._positions[tp] for tp in self._readable(topic)}
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
                await self._apply_group_async()
                budget = None if max_records is None else max_records - handled
                records = await self._read_available_async(budget, topic)
                if not records:
                    await self._maybe_auto_commit_async()
                    remaining = None if idle_deadline is None else idle_deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        break
                    await self._wait(topic, remaining, wake)
                    continue
                if idle_timeout is not None:
                    idle_deadline = time.monotonic() + idle_timeout
                handled += await self._handle(records, handler, is_async)
                await self._maybe_auto_commit_async()
        finally:
            self._async_wake = None
            # Read-aheads belong to this event loop; a later consume() may run on another.
            self._drop_read_ahead()
            if self.auto_commit:
                await asyncio.to_thread(self._auto_commit)
        return handled

    async def _handle(self, records: list[Record], handler: Handler, is_async: bool) -> int:
        """Run ``handler`` over ``records`` (one read); returns how many were handled."""
        self._seeked.clear()
        membership = self._membership
        handled = 0
        for record in records:
            if self._stopping:
                break
            if membership is not None and membership.has_pending():
                # A rebalance is waiting: apply it now rather than after a possibly large read
                # (positions are per record, so the rest is simply read again later).
                break
            tp = (record.topic, record.partition)
            if tp in self._seeked:
                continue  # the handler moved (or lost) this partition: the rest of this read is stale
            result = handler(record.partition, record.offset, record)
            if is_async or inspect.isawaitable(result):
                await result  # type: ignore[misc]
            handled += 1
            if tp not in self._seeked:
                # Only a record whose handler returned counts as consumed (at-least-once).
                self._positions[tp] = record.offset + 1
        return handled

    def _has_topic(self, topic: str) -> bool:
        return topic in self._subscription or any(t == topic for t, _ in self._positions)

    def stop(self) -> None:
        """Make :meth:`consume` (or a waiting :meth:`poll`) return after the record being handled."""
        self._stopping = True
        self._wake_up()

    # -- committing -----------------------------------------------------------------------------

    def _advanced(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The offsets past the known committed ones (a seek back is not committed automatically)."""
        return {tp: o for tp, o in offsets.items() if self._committed.get(tp) is None or o > self._committed[tp]}

    def _pending_offsets(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return {tp: o for tp, o in offsets.items() if self._committed.get(tp) != o}

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
        to_commit = self._pending_offsets(dict(self._positions) if offsets is None else offsets)
        self._commit(to_commit, strict=True)
        self._last_commit = time.monotonic()

    def _auto_commit(self) -> None:
        """Commit the positions; a refused commit is logged and dropped (the next owner re-reads)."""
        if self.group is None:
            return
        offsets = self._advanced(self._positions)
        try:
            self._commit(offsets, strict=False)
        finally:
            self._last_commit = time.monotonic()

    def _commit(self, offsets: Mapping[TopicPartition, int], *, strict: bool) -> None:
        if not offsets:
            return
        assert self.group is not None
        if self._membership is not None:
            self._commit_group(dict(offsets), strict=strict)
        elif self._group_source is not None:
            # Manual assignment: no member id; the coordinator accepts it only while the group has no live member.
            self._group_source.commit_offsets(self.group, offsets)
            self._committed.update(offsets)
        else:
            for (topic, pid), offset in offsets.items():
                self.source.commit_offset(self.group, topic, pid, offset)
                self._committed[(topic, pid)] = offset

    def _commit_group(self, offsets: dict[TopicPartition, int], *, strict: bool) -> None:
        """A fenced commit; a stale generation is retried once after a heartbeat for what is still owned."""
        membership = self._membership
        source = self._group_source
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
                    self._committed.update(still)
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
        self._committed.update(offsets)

    async def _maybe_auto_commit_async(self) -> None:
        if self.auto_commit and time.monotonic() - self._last_commit >= self.auto_commit_interval_s:
            # Offset files are fsynced (a remote commit is a round trip): keep that off the event loop.
            await asyncio.to_thread(self._auto_commit)

    def close(self, *, leave: bool | None = None) -> None:
        """Commit (when auto-commit is on), leave the group and forget the assignment.

        ``leave`` defaults to True for a dynamic member (its partitions move at
        once) and False for a static one (``instance_id``: a restart within the
        session timeout gets its partitions back without a rebalance).
        """
        self._drop_read_ahead()
        membership = self._membership
        if membership is None:
            if self.auto_commit:
                self._auto_commit()
            self._positions.clear()
            return
        membership.stop()
        try:
            self._apply_group_sync()  # a revoke that arrived last is honoured (commit before release)
        except LkstreamError as exc:
            log.info("group %r: closing after %s", self.group, exc)
        if self.auto_commit:
            self._auto_commit()
        held = sorted(self._positions)
        self._forget(held)
        if held:
            _call_sync(self.on_revoked, held)
        if self.instance_id is None if leave is None else leave:
            membership.leave()
        self._membership = None
        self._subscription.clear()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _call_sync(callback: PartitionsCallback | None, partitions: list[TopicPartition]) -> None:
    if callback is None:
        return
    result = callback(partitions)
    if inspect.isawaitable(result):
        raise InvalidArgumentError("a coroutine on_assigned/on_revoked callback needs consume(), not poll()")


async def _call_async(callback: PartitionsCallback | None, partitions: list[TopicPartition]) -> None:
    if callback is None:
        return
    result = callback(partitions)
    if inspect.isawaitable(result):
        await result


def _discard(read: asyncio.Future[ReadResult]) -> None:
    """Cancel a read-ahead nobody will await; a finished one's error is dropped, not logged as lost."""
    if read.done():
        if not read.cancelled():
            read.exception()
    else:
        read.cancel()
