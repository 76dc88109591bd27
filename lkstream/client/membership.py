"""A consumer's membership in a group: join, a background heartbeat thread, and a mailbox.

:class:`GroupMembership` is the client half of the coordinator protocol of
docs/groups.md. It owns one daemon thread that keeps the member alive and
learns what the member must consume; it never touches the consumer's
positions. The consumer applies what the thread learned on its *own* thread
or event loop (inside ``poll()`` / ``consume()``), so handlers, commits and the
``on_assigned`` / ``on_revoked`` callbacks never race with reads.

Why one thread sends every heartbeat
------------------------------------
``HeartbeatResult.owned`` is authoritative *at the moment the coordinator
answered*. If two threads heartbeated, an older answer could be applied after
a newer one and resurrect a partition the member had already released. So
every heartbeat that carries a release or whose answer is acted on goes
through this thread, and answers reach the mailbox in the order the
coordinator produced them.

The loop:

* When the last answer held nothing to do, the next heartbeat is a long poll
  (``max_wait_ms`` = the heartbeat interval): the coordinator answers at once
  when the group changes (a member joined or left, partitions were released),
  so a rebalance is noticed in one round trip, not after an interval.
* When the last answer told the member to revoke partitions, the thread does
  *not* heartbeat again until the consumer released them (:meth:`release`
  wakes it, so the new owner is not kept waiting) or an interval passed (a
  keep-alive; a revoke answer is never a long poll, so a tight loop here would
  spin).
* ``UnknownMemberError`` (the member missed its session timeout, e.g. the
  process was stopped): the mailbox reports the partitions as *lost* (they
  may already belong to someone else; no commit is possible) and the thread
  joins again. ``FencedInstanceError`` (a newer process took this static
  instance id) is fatal: the thread stops and the consumer raises it.
* Other errors (daemon unreachable, broker closed) are retried with a short
  backoff; the coordinator's session timeout decides when the member is gone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from lkstream.broker.groups.types import HeartbeatResult, JoinResult, TopicPartition
from lkstream.errors import BrokerClosedError, FencedInstanceError, LkstreamError, UnknownMemberError

log = logging.getLogger("lkstream.consumer.membership")

#: Backoff after a failed heartbeat (daemon restarting, network blip), seconds.
RETRY_BACKOFF_S = 0.2


class GroupSource(Protocol):
    """The group calls a :class:`GroupMembership` needs (an embedded Broker or a RemoteBroker)."""

    def join_group(
        self,
        group: str,
        topics: Iterable[str],
        *,
        member_id: str | None = None,
        instance_id: str | None = None,
        assignor: str = ...,
        session_timeout_ms: int = ...,
        rebalance_timeout_ms: int = ...,
        client_id: str = ...,
    ) -> JoinResult: ...

    def heartbeat(
        self,
        group: str,
        member_id: str,
        generation: int | None = None,
        released: Iterable[TopicPartition] = (),
        max_wait_ms: int = 0,
    ) -> HeartbeatResult: ...

    def leave_group(self, group: str, member_id: str) -> None: ...


@dataclass
class Instructions:
    """What the consumer must apply, taken from the mailbox in one piece.

    ``result`` is the newest heartbeat answer (older ones are superseded:
    ``owned`` is authoritative). ``lost`` is set when the member was removed
    (its partitions may already belong to another member: drop them without
    committing). ``fatal`` is an error the consumer must raise.
    """

    result: HeartbeatResult | None = None
    lost: bool = False
    fatal: LkstreamError | None = None
    member_id: str = ""
    generation: int = -1


@dataclass
class _Mailbox:
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: Instructions | None = None


class GroupMembership:
    """Membership of one consumer in ``group``: call :meth:`start`, then :meth:`take` from the consumer.

    Thread-safe: :meth:`take`, :meth:`release`, :meth:`add_listener` and
    :meth:`stop` may be called from any thread.
    """

    def __init__(
        self,
        source: GroupSource,
        group: str,
        topics: Iterable[str],
        *,
        assignor: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        heartbeat_interval_ms: int,
        instance_id: str | None = None,
        client_id: str = "",
    ) -> None:
        self.source = source
        self.group = group
        self.topics = frozenset(topics)
        self.assignor = assignor
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.instance_id = instance_id
        self.client_id = client_id
        self.member_id = ""
        self.generation = -1
        self._mailbox = _Mailbox()
        self._release_lock = threading.Lock()
        self._to_release: set[TopicPartition] = set()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._listeners: list[Callable[[], None]] = []
        self._thread: threading.Thread | None = None
        self._run_id = 0  # bumped by start/stop: answers of an older thread are dropped

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, member_id: str | None = None) -> HeartbeatResult:
        """Join, heartbeat once (a lone member gets its partitions here), then start the thread.

        Returns the first heartbeat answer, which is also posted to the mailbox.
        """
        self._join(member_id=member_id)
        first = self.source.heartbeat(self.group, self.member_id, self.generation, self._take_release())
        self.generation = first.generation
        with self._mailbox.lock:
            self._run_id += 1
            run_id = self._run_id
        self._stopped = stopped = threading.Event()
        self._post(run_id, result=first)
        self._thread = threading.Thread(
            target=self._run, args=(run_id, stopped), name=f"lkstream-heartbeat-{self.group}", daemon=True
        )
        self._thread.start()
        return first

    def update_topics(self, topics: Iterable[str]) -> HeartbeatResult:
        """Change the subscription: re-join under the same member id and heartbeat once, like :meth:`start`.

        The thread is stopped around the re-join so answers stay in order; the
        re-join changes the group, which ends the thread's long poll at once.
        """
        self.stop()
        self.topics = frozenset(topics)
        return self.start(member_id=self.member_id or None)

    def stop(self) -> None:
        """Stop the heartbeat thread (the member stays in the group until :meth:`leave` or its session timeout).

        Does not wait for a heartbeat long poll in flight: that thread exits when it
        answers, and its answer is discarded (:meth:`_post` checks the run).
        """
        with self._mailbox.lock:
            self._run_id += 1
        self._stopped.set()
        self._wake.set()

    def leave(self) -> None:
        """Leave the group now: the member's partitions move to the others at once."""
        if not self.member_id:
            return
        try:
            self.source.leave_group(self.group, self.member_id)
        except UnknownMemberError:
            pass  # already expired or fenced: nothing to leave
        except LkstreamError as exc:
            log.warning(
                "group %r: leave_group failed (%s); the session timeout will remove the member", self.group, exc
            )

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- consumer side ---------------------------------------------------------------------------

    def take(self) -> Instructions | None:
        """The instructions posted since the last call (None when nothing changed)."""
        with self._mailbox.lock:
            pending, self._mailbox.pending = self._mailbox.pending, None
            return pending

    def has_pending(self) -> bool:
        """Whether instructions wait in the mailbox (a cheap check between records)."""
        return self._mailbox.pending is not None

    def release(self, partitions: Iterable[TopicPartition]) -> None:
        """The consumer stopped consuming ``partitions`` (after committing): report them now."""
        with self._release_lock:
            self._to_release.update(partitions)
        self._wake.set()

    def poke(self) -> None:
        """Heartbeat now instead of after the current wait (e.g. after a commit was fenced)."""
        self._wake.set()

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` (from the heartbeat thread) whenever instructions are posted."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    # -- internals -------------------------------------------------------------------------------

    def _join(self, member_id: str | None) -> None:
        joined = self.source.join_group(
            self.group,
            sorted(self.topics),
            member_id=member_id,
            instance_id=self.instance_id,
            assignor=self.assignor,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            client_id=self.client_id,
        )
        self.member_id = joined.member_id
        self.generation = joined.generation

    def _post(
        self,
        run_id: int,
        *,
        result: HeartbeatResult | None = None,
        lost: bool = False,
        fatal: LkstreamError | None = None,
    ) -> None:
        with self._mailbox.lock:
            if run_id != self._run_id:
                return  # a stopped thread's late answer: superseded
            box = self._mailbox.pending or Instructions()
            if lost:
                # Everything before the loss is moot; only answers after the rejoin count.
                box = Instructions(lost=True)
            if result is not None:
                box.result = result
            if fatal is not None:
                box.fatal = fatal
            box.member_id = self.member_id
            box.generation = self.generation
            self._mailbox.pending = box
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:  # a closed event loop must not kill the heartbeat thread
                log.debug("group %r: a wake-up listener failed", self.group, exc_info=True)

    def _take_release(self) -> list[TopicPartition]:
        with self._release_lock:
            released = sorted(self._to_release)
            self._to_release.clear()
            return released

    def _give_back(self, released: list[TopicPartition]) -> None:
        with self._release_lock:
            self._to_release.update(released)

    def _run(self, run_id: int, stopped: threading.Event) -> None:
        interval_s = self.heartbeat_interval_ms / 1000.0
        revoke_pending = False
        while not stopped.is_set():
            if revoke_pending:
                # Wait for the consumer's release (or keep the session alive after an interval).
                self._wake.wait(interval_s)
            self._wake.clear()
            if stopped.is_set() or _source_closed(self.source):
                break  # stopped, or the broker (connection) closed: nothing left to keep alive
            released = self._take_release()
            wait_ms = 0 if revoke_pending and not released else self.heartbeat_interval_ms
            try:
                result = self.source.heartbeat(self.group, self.member_id, self.generation, released, wait_ms)
            except FencedInstanceError as exc:
                if stopped.is_set():
                    return
                log.error("group %r: %s", self.group, exc)
                self._post(run_id, fatal=exc)
                return
            except UnknownMemberError as exc:
                if stopped.is_set():
                    return  # it left (close) while this long poll was in flight
                log.warning("group %r: member %s was removed (%s); joining again", self.group, self.member_id, exc)
                revoke_pending = False
                self._rejoin_after_loss(run_id, stopped)
                continue
            except BrokerClosedError:
                return  # the embedded broker is gone: nothing left to keep alive
            except LkstreamError as exc:
                if stopped.is_set() or _source_closed(self.source):
                    return  # closed while a long poll was in flight: nothing is lost
                self._give_back(released)
                log.warning("group %r: heartbeat failed (%s); retrying", self.group, exc)
                stopped.wait(RETRY_BACKOFF_S)
                continue
            self.generation = result.generation
            if stopped.is_set():
                break
            revoke_pending = bool(result.revoke)
            self._post(run_id, result=result)

    def _rejoin_after_loss(self, run_id: int, stopped: threading.Event) -> None:
        with self._release_lock:
            self._to_release.clear()  # the coordinator freed them already
        while not stopped.is_set():
            try:
                self._join(member_id=None)
            except FencedInstanceError as exc:
                self._post(run_id, fatal=exc)
                stopped.set()
                return
            except BrokerClosedError:
                stopped.set()
                return
            except LkstreamError as exc:
                log.warning("group %r: rejoin failed (%s); retrying", self.group, exc)
                stopped.wait(RETRY_BACKOFF_S)
                continue
            self._post(run_id, lost=True)
            return


def _source_closed(source: object) -> bool:
    """Whether the embedded Broker or the RemoteBroker (both have ``closed``) was closed."""
    return getattr(source, "closed", False) is True
