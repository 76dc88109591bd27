"""Consumer group membership of lkstream.client.consumer: real embedded broker, real heartbeat threads.

Session timeouts are short (hundreds of ms) where a test needs a member to
expire; elsewhere they are long, so a slow CI machine never expires a member
by accident. Every wait has a deadline (``support.DEADLINE_S``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lkstream import Broker, Consumer, InvalidArgumentError, Record
from lkstream.errors import FencedInstanceError, GroupNotEmptyError, NotPartitionOwnerError, UnknownMemberError

from .support import DEADLINE_S

TP = tuple[str, int]
#: These tests expire members within a second: below Kafka's 6 s minimum, so the broker allows it.
SHORT_SESSION_MS = 100


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(persist_dir=str(tmp_path / "data"), group_min_session_timeout_ms=SHORT_SESSION_MS)
    yield b
    b.close()


@pytest.fixture
def consumers() -> Iterator[list[Consumer]]:
    """Consumers to close at teardown (threads stopped, groups left)."""
    made: list[Consumer] = []
    yield made
    for c in made:
        with contextlib.suppress(Exception):  # a test may have fenced or expired it on purpose
            c.close()


def _produce(broker: Broker, topic: str, partitions: int, per_partition: int, start: int = 0) -> None:
    for pid in range(partitions):
        broker.produce_many_sync(
            topic, [(None, f"{pid}:{i}".encode()) for i in range(start, start + per_partition)], partition=pid
        )


def _wait_until(check: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@dataclass
class Member:
    """A consumer polled by its own thread, recording what it handled and its callbacks."""

    consumer: Consumer
    name: str
    handled: list[tuple[str, int, int]] = field(default_factory=list)  # (topic, partition, offset)
    events: list[tuple[str, list[TP]]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    error: BaseException | None = None
    owned: list[TP] = field(default_factory=list)  # assignment as seen by the polling thread
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                records = self.consumer.poll(timeout=0.05)
                with self.lock:
                    self.handled.extend((r.topic, r.partition, r.offset) for r in records)
                    self.owned = self.consumer.assignment()
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def start(self) -> Member:
        self.thread = threading.Thread(target=self.run, name=f"member-{self.name}", daemon=True)
        self.thread.start()
        return self

    def halt(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(DEADLINE_S)
        assert self.error is None, self.error

    def assignment(self) -> list[TP]:
        with self.lock:
            return list(self.owned)


def _member(
    broker: Broker,
    consumers: list[Consumer],
    name: str,
    topic: str = "t",
    **options: object,
) -> Member:
    member = Member(consumer=None, name=name)  # type: ignore[arg-type]
    options.setdefault("group", "g")
    options.setdefault("auto_commit_interval_ms", 50)
    options.setdefault("heartbeat_interval_ms", 200)
    options.setdefault("session_timeout_ms", 10_000)
    consumer = Consumer(
        broker,
        on_assigned=lambda parts: member.events.append(("assigned", parts)),
        on_revoked=lambda parts: member.events.append(("revoked", parts)),
        **options,  # type: ignore[arg-type]
    )
    member.consumer = consumer
    consumers.append(consumer)
    consumer.subscribe(topic)
    return member


def _split_evenly(members: list[Member], partitions: list[TP]) -> bool:
    owned = [m.assignment() for m in members]
    flat = [tp for o in owned for tp in o]
    sizes = sorted(len(o) for o in owned)
    return sorted(flat) == sorted(partitions) and sizes[-1] - sizes[0] <= 1


# -- splitting partitions -----------------------------------------------------------------------------


def test_a_lone_member_gets_every_partition_at_subscribe(broker: Broker, consumers: list[Consumer]) -> None:
    broker.create_topic("t", 4)
    member = _member(broker, consumers, "a")
    assert member.consumer.assignment() == [("t", p) for p in range(4)]
    assert member.events == [("assigned", [("t", p) for p in range(4)])]


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "cooperative-sticky"])
def test_two_consumers_split_the_partitions(broker: Broker, consumers: list[Consumer], assignor: str) -> None:
    broker.create_topic("t", 4)
    _produce(broker, "t", 4, 5)
    a = _member(broker, consumers, "a", assignor=assignor).start()
    b = _member(broker, consumers, "b", assignor=assignor).start()
    everything = [("t", p) for p in range(4)]
    _wait_until(lambda: _split_evenly([a, b], everything), "the two members to split the partitions")
    _wait_until(lambda: len(a.handled) + len(b.handled) >= 20, "every record to be handled")
    a.halt()
    b.halt()
    assert len(a.assignment()) == len(b.assignment()) == 2
    assert not set(a.assignment()) & set(b.assignment())
    # Each member handled only its own partitions' records after the split, and together all of them once.
    assert sorted(a.handled + b.handled) == sorted(("t", p, o) for p in range(4) for o in range(5))


def test_a_third_member_joining_mid_stream_loses_and_repeats_nothing(broker: Broker, consumers: list[Consumer]) -> None:
    """Commit before revoke: the new owner of a moved partition starts exactly where the old one stopped."""
    partitions, per_round, rounds = 6, 20, 10
    broker.create_topic("t", partitions)
    members = [_member(broker, consumers, name).start() for name in ("a", "b")]
    for r in range(rounds):
        _produce(broker, "t", partitions, per_round, start=r * per_round)
        if r == rounds // 2:
            members.append(_member(broker, consumers, "c").start())
        time.sleep(0.02)
    total = partitions * per_round * rounds
    _wait_until(lambda: sum(len(m.handled) for m in members) >= total, "every record to be handled")
    everything = [("t", p) for p in range(partitions)]
    _wait_until(lambda: _split_evenly(members, everything), "three members to split the partitions")
    for m in members:
        m.halt()
    handled = [h for m in members for h in m.handled]
    assert sorted(handled) == sorted(("t", p, o) for p in range(partitions) for o in range(per_round * rounds))
    assert all(len(m.assignment()) == 2 for m in members)
    assert any(ev == "revoked" for ev, _ in members[0].events + members[1].events)
    # Per member and partition, records arrive in offset order.
    for m in members:
        for p in range(partitions):
            offsets = [o for _, pid, o in m.handled if pid == p]
            assert offsets == sorted(offsets)


# -- callbacks -------------------------------------------------------------------------------------


def test_eager_rebalance_revokes_everything_then_assigns_committing_first(
    broker: Broker, consumers: list[Consumer]
) -> None:
    broker.create_topic("t", 4)
    _produce(broker, "t", 4, 3)
    committed_at_revoke: dict[TP, int | None] = {}
    positions_at_revoke: dict[TP, int] = {}
    a = _member(broker, consumers, "a", assignor="range")

    def on_revoked(parts: list[TP]) -> None:
        a.events.append(("revoked", parts))
        for tp in parts:
            committed_at_revoke[tp] = a.consumer.committed(*tp)
            positions_at_revoke[tp] = a.consumer.position(*tp)

    a.consumer.on_revoked = on_revoked
    assert len(a.consumer.poll(timeout=1.0)) == 12  # handled; committed only at the next poll or revoke
    a.start()
    b = _member(broker, consumers, "b", assignor="range").start()
    _wait_until(lambda: _split_evenly([a, b], [("t", p) for p in range(4)]), "the split")
    a.halt()
    b.halt()
    everything = [("t", p) for p in range(4)]
    assert a.events[0] == ("assigned", everything)
    assert a.events[1] == ("revoked", everything)  # eager: all of them, in one callback
    assert a.events[2] == ("assigned", a.consumer.assignment())
    assert len(a.events) == 3
    assert b.events == [("assigned", b.consumer.assignment())]
    # The positions were committed before on_revoked ran, so b starts where a stopped.
    assert committed_at_revoke == {tp: 3 for tp in everything} == positions_at_revoke
    assert b.handled == []


def test_cooperative_rebalance_revokes_only_the_moved_partitions(broker: Broker, consumers: list[Consumer]) -> None:
    broker.create_topic("t", 4)
    a = _member(broker, consumers, "a", assignor="cooperative-sticky").start()
    b = _member(broker, consumers, "b", assignor="cooperative-sticky").start()
    everything = [("t", p) for p in range(4)]
    _wait_until(lambda: _split_evenly([a, b], everything), "the split")
    kept = a.assignment()
    # Records of the partitions a kept are consumed by a while the group settles, and after.
    _produce(broker, "t", 4, 10)
    _wait_until(lambda: len(a.handled) + len(b.handled) >= 40, "all records")
    a.halt()
    b.halt()
    moved = sorted(set(everything) - set(kept))
    assert a.events == [("assigned", everything), ("revoked", moved)]
    assert b.events == [("assigned", moved)]
    assert {(t, p) for t, p, _ in a.handled} == set(kept)


async def test_consume_wakes_on_a_rebalance_not_after_a_heartbeat_interval(
    broker: Broker, consumers: list[Consumer]
) -> None:
    """An idle consume() releases its partitions as soon as the group changes (long-poll + wake-up)."""
    broker.create_topic("t", 2)
    interval_ms = 8_000  # far longer than the deadline below: waking by interval would fail it
    a = _member(broker, consumers, "a", heartbeat_interval_ms=interval_ms, session_timeout_ms=30_000)
    task = asyncio.ensure_future(a.consumer.consume(None, lambda pid, off, rec: None))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    b = await asyncio.to_thread(
        _member, broker, consumers, "b", heartbeat_interval_ms=interval_ms, session_timeout_ms=30_000
    )

    async def b_has_its_share() -> None:
        while len(b.consumer.assignment()) != 1:
            await asyncio.to_thread(b.consumer.poll, 0.05)

    await asyncio.wait_for(b_has_its_share(), DEADLINE_S)
    elapsed = time.monotonic() - started
    a.consumer.stop()
    await asyncio.wait_for(task, DEADLINE_S)
    assert elapsed < interval_ms / 1000.0 / 2
    assert a.events[1][0] == "revoked"


# -- static membership, fencing, leaving -------------------------------------------------------------


def test_static_member_restart_within_the_session_timeout_keeps_its_assignment(
    broker: Broker, consumers: list[Consumer]
) -> None:
    broker.create_topic("t", 4)
    a = _member(broker, consumers, "a", instance_id="host-a").start()
    b = _member(broker, consumers, "b", instance_id="host-b").start()
    everything = [("t", p) for p in range(4)]
    _wait_until(lambda: _split_evenly([a, b], everything), "the split")
    a_had = a.assignment()
    generation = broker.describe_group("g").generation
    a.halt()
    assert a.consumer.membership is not None
    a.consumer.membership.stop()  # the process "dies": no leave, no more heartbeats
    b_events = list(b.events)

    restarted = _member(broker, consumers, "a2", instance_id="host-a")
    assert restarted.consumer.assignment() == a_had
    assert restarted.events == [("assigned", a_had)]
    time.sleep(0.3)  # give the group a chance to (wrongly) rebalance
    b.halt()
    assert b.events == b_events  # b saw no revoke
    assert broker.describe_group("g").generation == generation


def test_a_commit_after_the_member_expired_raises(broker: Broker, consumers: list[Consumer]) -> None:
    broker.create_topic("t", 1)
    _produce(broker, "t", 1, 3)
    a = _member(broker, consumers, "a", session_timeout_ms=300, heartbeat_interval_ms=100, auto_commit=False)
    assert len(a.consumer.poll(timeout=1.0)) == 3
    assert a.consumer.membership is not None
    a.consumer.membership.stop()  # a stalled process: no heartbeats
    _wait_until(lambda: not broker.describe_group("g").members, "the member to expire")
    with pytest.raises(UnknownMemberError):
        a.consumer.commit()
    assert a.consumer.committed("t", 0) is None


def test_a_commit_with_a_stale_generation_is_retried_for_partitions_still_owned(
    broker: Broker, consumers: list[Consumer]
) -> None:
    broker.create_topic("t", 2)
    _produce(broker, "t", 2, 4)
    a = _member(broker, consumers, "a", assignor="cooperative-sticky", auto_commit=False)
    assert a.consumer.membership is not None
    a.consumer.membership.stop()  # it learns nothing of the rebalance below
    old_generation = a.consumer.membership.generation
    b = Consumer(broker, group="g", assignor="cooperative-sticky", heartbeat_interval_ms=200)
    consumers.append(b)
    b.subscribe("t")
    assert broker.describe_group("g").generation > old_generation
    a.consumer.commit({("t", 0): 2, ("t", 1): 2})  # both still owned by a (one is being revoked)
    assert (a.consumer.committed("t", 0), a.consumer.committed("t", 1)) == (2, 2)


def test_a_fenced_manual_commit_of_a_lost_partition_raises(broker: Broker, consumers: list[Consumer]) -> None:
    broker.create_topic("t", 2)
    _produce(broker, "t", 2, 4)
    a = _member(broker, consumers, "a", assignor="cooperative-sticky", auto_commit=False).start()
    b = _member(broker, consumers, "b", assignor="cooperative-sticky", auto_commit=False).start()
    _wait_until(lambda: _split_evenly([a, b], [("t", 0), ("t", 1)]), "the split")
    a.halt()
    b.halt()
    (lost,) = b.assignment()
    with pytest.raises(NotPartitionOwnerError):
        a.consumer.commit({lost: 1})
    assert a.consumer.committed(*lost) is None


def test_close_leaves_so_the_partitions_move_at_once(broker: Broker, consumers: list[Consumer]) -> None:
    broker.create_topic("t", 4)
    a = _member(broker, consumers, "a", session_timeout_ms=60_000).start()
    b = _member(broker, consumers, "b", session_timeout_ms=60_000).start()
    everything = [("t", p) for p in range(4)]
    _wait_until(lambda: _split_evenly([a, b], everything), "the split")
    b.halt()
    b.consumer.close()
    assert b.events[-1] == ("revoked", b.assignment())
    _wait_until(lambda: a.assignment() == everything, "a to own everything", timeout=DEADLINE_S)
    a.halt()


def test_the_heartbeat_thread_keeps_a_member_alive_without_polls(broker: Broker, consumers: list[Consumer]) -> None:
    broker.create_topic("t", 2)
    a = _member(broker, consumers, "a", session_timeout_ms=400, heartbeat_interval_ms=100)
    time.sleep(1.0)  # no poll() at all, 2.5 session timeouts
    (member,) = broker.describe_group("g").members
    assert a.consumer.membership is not None
    assert member.member_id == a.consumer.membership.member_id


# -- manual assignment, pause/resume, options ---------------------------------------------------------


def test_manual_assignment_commits_only_while_the_group_has_no_live_member(
    broker: Broker, consumers: list[Consumer]
) -> None:
    broker.create_topic("t", 2)
    _produce(broker, "t", 2, 3)
    manual = Consumer(broker, group="g", auto_commit=False)
    consumers.append(manual)
    manual.assign([("t", 1)])
    assert [(r.partition, r.offset) for r in manual.poll(timeout=1.0)] == [(1, 0), (1, 1), (1, 2)]
    manual.commit()
    assert manual.committed("t", 1) == 3
    with pytest.raises(InvalidArgumentError, match="assign"):
        manual.subscribe("t")
    member = _member(broker, consumers, "m")
    assert member.consumer.position("t", 1) == 3  # the member starts at the manual commit
    with pytest.raises(GroupNotEmptyError, match="live member"):
        manual.commit({("t", 1): 3, ("t", 0): 1})


def test_pause_and_resume(broker: Broker, consumers: list[Consumer]) -> None:
    broker.create_topic("t", 2)
    _produce(broker, "t", 2, 3)
    a = _member(broker, consumers, "a")
    a.consumer.pause([("t", 0)])
    assert a.consumer.paused() == [("t", 0)]
    assert {r.partition for r in a.consumer.poll(timeout=0.2)} == {1}
    assert a.consumer.poll(timeout=0.1) == []  # p0 has records, but it is paused
    assert a.consumer.position("t", 0) == 0
    a.consumer.resume([("t", 0)])
    assert a.consumer.paused() == []
    assert [(r.partition, r.offset) for r in a.consumer.poll(timeout=0.2)] == [(0, 0), (0, 1), (0, 2)]
    with pytest.raises(InvalidArgumentError, match="not assigned"):
        a.consumer.pause([("t", 7)])


def test_a_paused_partition_stays_paused_across_a_cooperative_rebalance_it_survives(
    broker: Broker, consumers: list[Consumer]
) -> None:
    broker.create_topic("t", 2)
    a = _member(broker, consumers, "a", assignor="cooperative-sticky")
    a.consumer.pause([("t", 0), ("t", 1)])
    a.start()
    b = _member(broker, consumers, "b", assignor="cooperative-sticky").start()
    _wait_until(lambda: _split_evenly([a, b], [("t", 0), ("t", 1)]), "the split")
    a.halt()
    b.halt()
    assert a.consumer.paused() == a.consumer.assignment()  # the moved one is no longer a's


@pytest.mark.parametrize(
    "kwargs",
    [
        {"heartbeat_interval_ms": 0},
        {"session_timeout_ms": -1},
        {"heartbeat_interval_ms": 5000, "session_timeout_ms": 5000},
    ],
)
def test_bad_group_options_are_rejected(broker: Broker, kwargs: dict[str, int]) -> None:
    with pytest.raises(InvalidArgumentError):
        Consumer(broker, group="g", **kwargs)  # type: ignore[arg-type]


def test_an_offset_store_of_another_directory_makes_a_standalone_consumer(
    broker: Broker, consumers: list[Consumer], tmp_path: Path
) -> None:
    from lkstream import OffsetStore

    broker.create_topic("t", 2)
    a = _member(broker, consumers, "a")
    private = Consumer(broker, group="g", offset_store=OffsetStore(str(tmp_path / "private")))
    consumers.append(private)
    private.subscribe("t")
    assert not private.group_managed
    assert private.assignment() == [("t", 0), ("t", 1)] == a.consumer.assignment()


def test_records_of_a_revoked_partition_are_not_handled_after_the_revoke(
    broker: Broker, consumers: list[Consumer]
) -> None:
    """A record handler that triggers a rebalance: consume() drops the rest of the moved partition's batch."""
    broker.create_topic("t", 2)
    _produce(broker, "t", 2, 50)
    seen: list[tuple[int, int]] = []
    holder: dict[str, Member] = {}

    async def run() -> None:
        a = _member(broker, consumers, "a", assignor="range")

        def handler(pid: int, offset: int, record: Record) -> None:
            seen.append((pid, offset))
            if len(seen) == 5:
                holder["b"] = _member(broker, consumers, "b", assignor="range").start()
            if len(seen) >= 100:
                a.consumer.stop()

        await asyncio.wait_for(a.consumer.consume(None, handler, idle_timeout=1.0), DEADLINE_S)

    asyncio.run(run())
    b = holder["b"]
    _wait_until(lambda: len(b.handled) + len(seen) >= 100, "all records handled")
    b.halt()
    # Nothing lost, and nothing handled by both after the handover (a committed before revoking).
    all_handled = sorted(seen + [(p, o) for _, p, o in b.handled])
    assert sorted(set(all_handled)) == [(p, o) for p in range(2) for o in range(50)]
    assert len(all_handled) == 100


def test_a_fenced_static_member_raises_from_poll(broker: Broker, consumers: list[Consumer]) -> None:
    broker.create_topic("t", 2)
    old = _member(broker, consumers, "old", instance_id="host-a", heartbeat_interval_ms=100)
    _member(broker, consumers, "new", instance_id="host-a")  # the same instance restarted elsewhere
    deadline = time.monotonic() + DEADLINE_S
    with pytest.raises(FencedInstanceError):
        while time.monotonic() < deadline:
            old.consumer.poll(timeout=0.05)


def test_a_handler_stuck_past_the_rebalance_timeout_loses_its_partitions_and_rejoins(
    broker: Broker, consumers: list[Consumer]
) -> None:
    """The coordinator removes a member that does not release in time; the consumer drops, rejoins, resumes."""
    broker.create_topic("t", 2)
    _produce(broker, "t", 2, 5)
    stuck = threading.Event()
    release = threading.Event()
    seen: list[tuple[int, int]] = []
    holder: dict[str, Member] = {}
    a = _member(broker, consumers, "a", rebalance_timeout_ms=300, heartbeat_interval_ms=100)
    first_member_id = a.consumer.membership.member_id if a.consumer.membership else ""

    async def handler(pid: int, offset: int, record: Record) -> None:
        seen.append((pid, offset))
        if len(seen) == 1:
            stuck.set()
            # The handler does not return (the event loop stays free for the test); the heartbeat thread runs on.
            await asyncio.to_thread(release.wait, DEADLINE_S)

    async def run() -> None:
        task = asyncio.ensure_future(a.consumer.consume(None, handler, idle_timeout=1.0))
        await asyncio.to_thread(stuck.wait, DEADLINE_S)
        holder["b"] = (await asyncio.to_thread(_member, broker, consumers, "b")).start()
        # a cannot release while stuck: after 300 ms the coordinator removes it (its thread then rejoins).
        await asyncio.to_thread(
            _wait_until,
            lambda: first_member_id not in {m.member_id for m in broker.describe_group("g").members},
            "the stuck member to be removed",
        )
        release.set()
        await asyncio.wait_for(task, DEADLINE_S)

    asyncio.run(run())
    everything = [("t", 0), ("t", 1)]
    # Lost (no commit: the coordinator had taken them), then a share again as a new member.
    assert a.events[:2] == [("assigned", everything), ("revoked", everything)]
    assert a.events[2][0] == "assigned"
    assert a.consumer.membership is not None
    assert a.consumer.membership.member_id != first_member_id
    b = holder["b"]
    _wait_until(
        lambda: {(p, o) for _, p, o in b.handled} | set(seen) >= {(p, o) for p in range(2) for o in range(5)},
        "all records",
    )
    b.halt()
    # At-least-once: the record handled while stuck was never committed; its partition is read again.
    assert sorted(set(seen + [(p, o) for _, p, o in b.handled])) == [(p, o) for p in range(2) for o in range(5)]
    assert len(seen) + len(b.handled) > 10


# -- random schedules ----------------------------------------------------------------------------------

Action = tuple[str, int]  # ("join" | "leave" | "crash" | "restart", which member slot)
SCHEDULE = st.lists(
    st.tuples(st.sampled_from(["join", "join", "leave", "crash", "restart"]), st.integers(0, 3)),
    min_size=2,
    max_size=6,
)


@dataclass
class Holder:
    """A member thread that records, per partition, when it held it: on_assigned .. on_revoked (or its crash)."""

    member: Member
    held: dict[int, list[list[float]]] = field(default_factory=dict)
    crashed: bool = False

    def assigned(self, parts: list[TP]) -> None:
        now = time.monotonic()
        for _, pid in parts:
            self.held.setdefault(pid, []).append([now, math.inf])

    def revoked(self, parts: list[TP]) -> None:
        if self.crashed:
            return  # a dead process calls nothing
        now = time.monotonic()
        for _, pid in parts:
            self.held[pid][-1][1] = now

    def crash(self) -> None:
        """SIGKILL stand-in: the poll thread and the heartbeat thread stop; nothing leaves, nothing commits."""
        self.member.halt()
        assert self.member.consumer.membership is not None
        self.member.consumer.membership.stop()
        now = time.monotonic()
        for intervals in self.held.values():
            if intervals[-1][1] == math.inf:
                intervals[-1][1] = now
        self.crashed = True


def _apply(action: str, slot: int, slots: dict[int, Holder], add: Callable[[int], None]) -> None:
    """One step of a schedule; steps that make no sense now (leave the last member...) are skipped."""
    current = slots.get(slot)
    if action == "join" and current is None:
        add(slot)
    elif action == "leave" and current is not None and len(slots) > 1:
        current.member.halt()
        current.member.consumer.close(leave=True)
        del slots[slot]
    elif action == "crash" and current is not None and len(slots) > 1:
        current.crash()
        del slots[slot]
    elif action == "restart" and current is not None:
        current.crash()
        add(slot)  # the same static instance id, within the session timeout


def _run_schedule(data_dir: str, partitions: int, schedule: list[Action], assignor: str) -> list[Holder]:
    """Run ``schedule`` against a fresh broker while a thread produces; returns every member that ever ran."""
    broker = Broker(persist_dir=data_dir, group_min_session_timeout_ms=SHORT_SESSION_MS)
    made: list[Consumer] = []
    holders: list[Holder] = []  # every member ever started; closed ones stay for the checks
    slots: dict[int, Holder] = {}
    stop = threading.Event()

    def produce() -> None:
        n = 0
        while not stop.is_set():
            for pid in range(partitions):
                broker.produce_many_sync("t", [(None, b"%d" % n)], partition=pid)
            n += 1
            time.sleep(0.005)

    def add(slot: int) -> None:
        holder = Holder(member=None)  # type: ignore[arg-type]
        member = _member(
            broker,
            made,
            f"s{slot}",
            assignor=assignor,
            instance_id=f"slot-{slot}",
            session_timeout_ms=500,
            heartbeat_interval_ms=100,
        )
        holder.member = member
        member.consumer.on_assigned = holder.assigned
        member.consumer.on_revoked = holder.revoked
        holder.assigned(member.consumer.assignment())  # subscribe() already applied the first grant
        member.start()
        holders.append(holder)
        slots[slot] = holder

    try:
        broker.create_topic("t", partitions)
        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        add(0)
        for action, slot in schedule:
            _apply(action, slot, slots, add)
            time.sleep(0.15)
        stop.set()
        producer.join(DEADLINE_S)
        ends = {pid: broker.partition("t", pid).high_watermark for pid in range(partitions)}

        def all_handled() -> bool:
            got: dict[int, set[int]] = {pid: set() for pid in range(partitions)}
            for h in holders:
                with h.member.lock:
                    for _, pid, off in h.member.handled:
                        got[pid].add(off)
            return all(got[pid] >= set(range(ends[pid])) for pid in range(partitions))

        _wait_until(all_handled, f"every record handled ({assignor}, {schedule})")
    finally:
        stop.set()
        for h in holders:
            if not h.crashed:
                h.member.halt()
                with contextlib.suppress(Exception):
                    h.member.consumer.close()
        broker.close()
    return holders


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(schedule=SCHEDULE, assignor=st.sampled_from(["range", "cooperative-sticky"]))
def test_random_schedules_never_share_a_partition_and_never_skip_a_record(
    tmp_path_factory: pytest.TempPathFactory, schedule: list[Action], assignor: str
) -> None:
    """Joins, leaves, crashes and static restarts while records flow: no partition is held by two members at
    once, every record is handled, and without crashes none twice (commit before revoke)."""
    partitions = 4
    holders = _run_schedule(str(tmp_path_factory.mktemp("schedule")), partitions, schedule, assignor)
    for pid in range(partitions):
        intervals = sorted(iv for h in holders for iv in h.held.get(pid, []))
        for before, after in itertools.pairwise(intervals):
            assert before[1] <= after[0], f"partition {pid} held twice at once: {before} {after} ({schedule})"
    if not any(h.crashed for h in holders):
        handled = [(pid, off) for h in holders for _, pid, off in h.member.handled]
        assert len(handled) == len(set(handled)), f"a record was handled twice without a crash ({schedule})"


def test_a_manual_commit_from_on_revoked_lands_before_the_partitions_move(
    broker: Broker, consumers: list[Consumer]
) -> None:
    broker.create_topic("t", 2)
    _produce(broker, "t", 2, 4)
    a = _member(broker, consumers, "a", auto_commit=False)
    committed_in_callback: list[dict[TP, int | None]] = []

    def on_revoked(parts: list[TP]) -> None:
        a.consumer.commit({tp: a.consumer.position(*tp) for tp in parts})
        committed_in_callback.append({tp: a.consumer.committed(*tp) for tp in parts})

    a.consumer.on_revoked = on_revoked
    assert len(a.consumer.poll(timeout=1.0)) == 8
    a.start()
    b = _member(broker, consumers, "b", auto_commit=False).start()
    _wait_until(lambda: _split_evenly([a, b], [("t", 0), ("t", 1)]), "the split")
    a.halt()
    b.halt()
    assert committed_in_callback[0] == {("t", 0): 4, ("t", 1): 4}
    assert b.handled == []  # b started at a's commit
