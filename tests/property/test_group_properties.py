"""The group coordinator under random schedules of joins, leaves, crashes, heartbeats and commits.

Members are simulated clients: they join, heartbeat (releasing what they were
told to revoke, or not yet), leave, crash (stop calling; the clock then moves
past their session timeout) and commit offsets, sometimes from a stale
generation, for partitions they do not own, or after they crashed. Topics grow.
Checked after every step:

* no partition is owned by two members, ever;
* generations never decrease;
* the committed offsets equal the model's, which applies a commit only when the
  coordinator must accept it (live member, its current generation, owns the
  partition, offset not below the committed one), and every other commit raised
  the matching error;
* after a ``settle`` (every live member heartbeats and releases until nothing
  changes, with no time passing) every partition of the subscribed topics is
  owned by exactly one member and every member is stable.

Hypothesis is derandomized (a fixed seed) so a failure replays exactly.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from lkstream.broker.groups import (
    GroupCoordinator,
    GroupState,
    NotPartitionOwnerError,
    OffsetRegressionError,
    StaleGenerationError,
    UnknownMemberError,
)
from lkstream.broker.groups.limits import GroupLimits
from lkstream.broker.groups.types import TopicPartition
from lkstream.errors import UnknownTopicError
from lkstream.storage.clock import ManualClock
from lkstream.storage.offsets import OffsetStore

GROUP = "g"
SESSION_MS = 3000
REBALANCE_MS = 5000


@dataclass
class Client:
    """What a consumer process knows: its id, last generation, and what it must still release."""

    member_id: str
    topics: frozenset[str]
    generation: int
    revoke: frozenset[TopicPartition] = field(default_factory=frozenset)
    owned: frozenset[TopicPartition] = field(default_factory=frozenset)
    crashed: bool = False


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="lkstream-groups-")
        self.clock = ManualClock()
        self.topics = {"a": 3, "b": 5}
        ids = itertools.count()
        self.store = OffsetStore(self.dir, clock=self.clock)
        self.coord = GroupCoordinator(
            self.store,
            self._partitions_for,
            self.clock,
            member_id_factory=lambda c: f"m{next(ids)}",
            limits=GroupLimits(min_session_timeout_ms=1),  # a manual clock: seconds instead of Kafka's minimum
        )
        self.clients: list[Client] = []
        self.committed: dict[TopicPartition, int] = {}
        self.assignor = "range"
        self.last_generation = 0

    def _partitions_for(self, topic: str) -> int:
        if topic not in self.topics:
            raise UnknownTopicError(topic)
        return self.topics[topic]

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize(assignor=st.sampled_from(["range", "roundrobin", "cooperative-sticky"]))
    def choose_assignor(self, assignor: str) -> None:
        self.assignor = assignor

    # -- helpers -------------------------------------------------------------------------------------

    def _live(self) -> dict[str, tuple[int, frozenset[TopicPartition]]]:
        """member id -> (generation, owned), as the coordinator sees it now."""
        return {m.member_id: (m.generation, m.owned) for m in self.coord.describe(GROUP).members}

    def _heartbeat(self, client: Client, release: bool) -> None:
        try:
            hb = self.coord.heartbeat(GROUP, client.member_id, released=client.revoke if release else ())
        except UnknownMemberError:
            self.clients.remove(client)  # expired (rebalance or session timeout): a real client rejoins
            return
        client.generation = hb.generation
        client.revoke = hb.revoke
        client.owned = hb.owned
        assert hb.revoke <= hb.owned
        assert not (hb.stable and hb.revoke)

    # -- rules ---------------------------------------------------------------------------------------

    @precondition(lambda self: len(self.clients) < 6)
    @rule(topics=st.sets(st.sampled_from(["a", "b", "c"]), min_size=1))
    def join(self, topics: set[str]) -> None:
        joined = self.coord.join(
            GROUP,
            topics,
            assignor=self.assignor,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
        )
        client = Client(joined.member_id, frozenset(topics), joined.generation)
        self.clients.append(client)
        self._heartbeat(client, release=False)  # a real client heartbeats right after joining

    @precondition(lambda self: any(not c.crashed for c in self.clients))
    @rule(release=st.booleans())
    def heartbeat_all(self, release: bool) -> None:
        for client in [c for c in self.clients if not c.crashed]:
            self._heartbeat(client, release)

    @precondition(lambda self: any(not c.crashed for c in self.clients))
    @rule(data=st.data(), release=st.booleans())
    def heartbeat(self, data: st.DataObject, release: bool) -> None:
        client = data.draw(st.sampled_from([c for c in self.clients if not c.crashed]))
        self._heartbeat(client, release)

    @precondition(lambda self: any(not c.crashed for c in self.clients))
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        client = data.draw(st.sampled_from([c for c in self.clients if not c.crashed]))
        with contextlib.suppress(UnknownMemberError):  # it may have expired already
            self.coord.leave(GROUP, client.member_id)
        self.clients.remove(client)

    @precondition(lambda self: any(not c.crashed for c in self.clients))
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        data.draw(st.sampled_from([c for c in self.clients if not c.crashed])).crashed = True

    @rule(ms=st.sampled_from([100, 1000, 2500, SESSION_MS + 1]))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)
        self.coord.tick()

    @precondition(lambda self: self.topics["b"] < 8)
    @rule()
    def grow_topic(self) -> None:
        self.topics["b"] += 1
        self.coord.topics_changed()

    @precondition(lambda self: bool(self.clients))
    @rule(data=st.data(), offset=st.integers(0, 30), stale=st.sampled_from([False, False, False, True]))
    def commit(self, data: st.DataObject, offset: int, stale: bool) -> None:
        client = data.draw(st.sampled_from(self.clients))
        every = [(t, p) for t in ("a", "b") for p in range(self.topics[t])]
        # Mostly partitions the client believes it owns, so that accepted commits (and regressions) happen.
        mine = sorted(client.owned)
        pick_mine = bool(mine) and data.draw(st.booleans())
        tp = data.draw(st.sampled_from(mine if pick_mine else every))
        generation = client.generation - 1 if stale else client.generation
        live = self._live()
        if client.member_id not in live:
            expected: type[Exception] | None = UnknownMemberError
        elif generation != live[client.member_id][0]:
            expected = StaleGenerationError
        elif tp not in live[client.member_id][1]:
            expected = NotPartitionOwnerError
        elif offset < self.committed.get(tp, 0):
            expected = OffsetRegressionError
        else:
            expected = None
        try:
            self.coord.commit(GROUP, client.member_id, generation, {tp: offset})
        except (UnknownMemberError, StaleGenerationError, NotPartitionOwnerError, OffsetRegressionError) as exc:
            assert expected is not None and type(exc) is expected, (exc, expected)
        else:
            assert expected is None, f"commit should have failed with {expected}"
            self.committed[tp] = offset
        if client.crashed and client.member_id not in live:
            self.clients.remove(client)  # its session expired: the zombie got its refusal, now forget it

    @rule()
    def settle(self) -> None:
        for _ in range(3):
            for client in [c for c in self.clients if not c.crashed]:
                self._heartbeat(client, release=True)
        if any(c.crashed for c in self.clients):
            return  # a crashed member holds its partitions until its session times out
        desc = self.coord.describe(GROUP)
        subscribed = {t for c in self.clients for t in c.topics if t in self.topics}
        owned = Counter(tp for m in desc.members for tp in m.owned)
        assert set(owned) == {(t, p) for t in subscribed for p in range(self.topics[t])}
        assert all(n == 1 for n in owned.values())
        if self.clients:
            assert desc.state is GroupState.STABLE

    # -- invariants ----------------------------------------------------------------------------------

    @invariant()
    def no_partition_has_two_owners(self) -> None:
        owned = Counter(tp for m in self.coord.describe(GROUP).members for tp in m.owned)
        assert all(n == 1 for n in owned.values()), owned

    @invariant()
    def generation_never_decreases(self) -> None:
        described = self.coord.describe(GROUP)
        if not described.members:
            self.last_generation = 0  # a group without members is forgotten: the next one starts afresh
            return
        assert described.generation >= self.last_generation
        self.last_generation = described.generation

    @invariant()
    def committed_offsets_match_the_model(self) -> None:
        assert self.coord.fetch_committed(GROUP) == self.committed


GroupMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestGroupCoordinator = GroupMachine.TestCase
