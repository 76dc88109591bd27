"""Partition assignors: pure functions from subscriptions to an assignment.

Each takes

* ``subscriptions``: member key -> subscribed topics. Members are ordered by
  their key (the coordinator uses the static instance id when there is one, so
  a restarted static member keeps its place);
* ``partition_counts``: topic -> number of partitions (a subscribed topic that
  is missing or has 0 partitions contributes nothing);
* ``current``: member key -> partitions it is assigned now (only the sticky
  assignor reads it),

and returns member key -> assigned partitions, with every partition of every
subscribed topic given to exactly one member subscribed to its topic.

* ``range``: Kafka's RangeAssignor. Per topic, the subscribed members in order
  get contiguous ranges; the first ``count % members`` get one extra.
* ``roundrobin``: Kafka's RoundRobinAssignor. All partitions sorted by
  ``(topic, partition)`` are dealt in turn to the members in order, skipping a
  member not subscribed to the partition's topic.
* ``cooperative-sticky``: keeps every current assignment that is still valid,
  gives unassigned partitions to the least-loaded eligible member, then moves
  one partition at a time from a member to an eligible member holding at least
  two fewer, until no such move exists. Members with the same subscriptions
  end within one partition of each other, and only partitions that must move
  for that do move: every move lowers the sum of squared counts, and a member
  above its fair share gives up exactly its excess.

Cost: range and roundrobin are O(P log P + M log M). The sticky rebalance loop
is O(moves x M log M) with homogeneous subscriptions (each move finds a
partition in O(1) amortised); fine for thousands of partitions.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Mapping, Set

from lkstream.broker.groups.errors import UnknownAssignorError
from lkstream.broker.groups.types import TopicPartition

Assignment = dict[str, set[TopicPartition]]
Assignor = Callable[
    [Mapping[str, Collection[str]], Mapping[str, int], Mapping[str, Set[TopicPartition]]],
    Assignment,
]


def _topics_members(subscriptions: Mapping[str, Collection[str]]) -> dict[str, list[str]]:
    """topic -> sorted member keys subscribed to it."""
    by_topic: dict[str, list[str]] = {}
    for member in sorted(subscriptions):
        for topic in subscriptions[member]:
            by_topic.setdefault(topic, []).append(member)
    return by_topic


def range_assign(
    subscriptions: Mapping[str, Collection[str]],
    partition_counts: Mapping[str, int],
    current: Mapping[str, Set[TopicPartition]] | None = None,
) -> Assignment:
    """Kafka's range assignor (see the module docstring)."""
    result: Assignment = {member: set() for member in subscriptions}
    for topic, members in sorted(_topics_members(subscriptions).items()):
        count = partition_counts.get(topic, 0)
        share, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = share + (1 if i < extra else 0)
            result[member].update((topic, pid) for pid in range(start, start + size))
            start += size
    return result


def roundrobin_assign(
    subscriptions: Mapping[str, Collection[str]],
    partition_counts: Mapping[str, int],
    current: Mapping[str, Set[TopicPartition]] | None = None,
) -> Assignment:
    """Kafka's round-robin assignor (see the module docstring)."""
    members = sorted(subscriptions)
    subscribed = {member: frozenset(subscriptions[member]) for member in members}
    result: Assignment = {member: set() for member in members}
    if not members:
        return result
    topics = sorted({t for topics in subscribed.values() for t in topics})
    turn = 0
    for topic in topics:
        for pid in range(partition_counts.get(topic, 0)):
            # At least one member subscribes to ``topic``, so this ends within one lap.
            while topic not in subscribed[members[turn % len(members)]]:
                turn += 1
            result[members[turn % len(members)]].add((topic, pid))
            turn += 1
    return result


def cooperative_sticky_assign(
    subscriptions: Mapping[str, Collection[str]],
    partition_counts: Mapping[str, int],
    current: Mapping[str, Set[TopicPartition]] | None = None,
) -> Assignment:
    """Sticky, balanced assignment that moves as few partitions as balance needs (see the module docstring)."""
    members = sorted(subscriptions)
    if not members:
        return {}
    subscribed = {member: frozenset(subscriptions[member]) for member in members}
    valid = {
        (topic, pid)
        for topic in {t for topics in subscribed.values() for t in topics}
        for pid in range(partition_counts.get(topic, 0))
    }
    # Sorted lists so that what moves is deterministic (the highest partitions move first).
    held: dict[str, list[TopicPartition]] = {member: [] for member in members}
    taken: set[TopicPartition] = set()
    previous = current or {}
    # 1. Keep what is still valid; a partition two members claim stays with the first.
    for member in members:
        for tp in sorted(previous.get(member, ())):
            if tp in valid and tp not in taken and tp[0] in subscribed[member]:
                held[member].append(tp)
                taken.add(tp)
    # 2. Unassigned partitions go to the least-loaded eligible member.
    for tp in sorted(valid - taken):
        eligible = [m for m in members if tp[0] in subscribed[m]]
        best = min(eligible, key=lambda m: (len(held[m]), m))
        bisect.insort(held[best], tp)
    # 3. Move one partition at a time from a heavier to a lighter (by >= 2) eligible member.
    homogeneous = len(set(subscribed.values())) == 1
    while _move_one(members, subscribed, held, homogeneous):
        pass
    return {member: set(tps) for member, tps in held.items()}


def _move_one(
    members: list[str],
    subscribed: Mapping[str, frozenset[str]],
    held: dict[str, list[TopicPartition]],
    homogeneous: bool,
) -> bool:
    """Move one partition from a member to an eligible member holding >= 2 fewer; False when none can move."""
    order = sorted(members, key=lambda m: (len(held[m]), m))
    if homogeneous:  # every partition is eligible everywhere: lightest takes the heaviest's last partition
        light, heavy = order[0], order[-1]
        if len(held[heavy]) - len(held[light]) < 2:
            return False
        bisect.insort(held[light], held[heavy].pop())
        return True
    for heavy in reversed(order):
        for light in order:
            if len(held[heavy]) - len(held[light]) < 2:
                break  # ``order`` is ascending: no lighter member remains
            for i in range(len(held[heavy]) - 1, -1, -1):
                if held[heavy][i][0] in subscribed[light]:
                    bisect.insort(held[light], held[heavy].pop(i))
                    return True
    return False


ASSIGNORS: dict[str, Assignor] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "cooperative-sticky": cooperative_sticky_assign,
}
"""Assignor name (as clients pass it) -> function."""

EAGER_ASSIGNORS = frozenset({"range", "roundrobin"})
"""Assignors whose rebalances revoke everything before granting anything (stop-the-world)."""


def get_assignor(name: object) -> Assignor:
    """The assignor called ``name``; :class:`UnknownAssignorError` for any other value."""
    if not isinstance(name, str) or name not in ASSIGNORS:
        raise UnknownAssignorError(name, tuple(ASSIGNORS))
    return ASSIGNORS[name]
