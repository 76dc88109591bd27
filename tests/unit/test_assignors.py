"""lkstream.broker.groups.assignors: range, roundrobin and cooperative-sticky."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lkstream.broker.groups.assignors import (
    ASSIGNORS,
    cooperative_sticky_assign,
    get_assignor,
    range_assign,
    roundrobin_assign,
)
from lkstream.broker.groups.errors import UnknownAssignorError
from lkstream.broker.groups.types import TopicPartition
from lkstream.errors import InvalidArgumentError

Assignment = dict[str, set[TopicPartition]]


def all_partitions(counts: dict[str, int], topics: set[str]) -> set[TopicPartition]:
    return {(t, p) for t in topics for p in range(counts.get(t, 0))}


def check_complete_and_exclusive(subs: dict[str, set[str]], counts: dict[str, int], result: Assignment) -> None:
    """Every partition of every subscribed topic goes to exactly one member subscribed to its topic."""
    assert set(result) == set(subs)
    seen = Counter(tp for tps in result.values() for tp in tps)
    assert all(n == 1 for n in seen.values()), seen
    assert set(seen) == all_partitions(counts, {t for ts in subs.values() for t in ts})
    for member, tps in result.items():
        assert all(t in subs[member] for t, _ in tps)


def test_range_gives_contiguous_ranges_with_extras_first() -> None:
    subs = {"a": {"t"}, "b": {"t"}, "c": {"t"}}
    result = range_assign(subs, {"t": 8}, {})
    assert result == {"a": {("t", p) for p in (0, 1, 2)}, "b": {("t", p) for p in (3, 4, 5)}, "c": {("t", 6), ("t", 7)}}


def test_range_works_per_topic_so_the_first_member_gets_every_topics_extra() -> None:
    # Kafka's known range imbalance: with two 3-partition topics the first member gets 4 of 6.
    result = range_assign({"a": {"x", "y"}, "b": {"x", "y"}}, {"x": 3, "y": 3}, {})
    assert len(result["a"]) == 4 and len(result["b"]) == 2


def test_roundrobin_deals_sorted_partitions_over_sorted_members() -> None:
    result = roundrobin_assign({"b": {"x", "y"}, "a": {"x", "y"}}, {"x": 3, "y": 3}, {})
    assert result == {"a": {("x", 0), ("x", 2), ("y", 1)}, "b": {("x", 1), ("y", 0), ("y", 2)}}


def test_roundrobin_skips_members_not_subscribed_to_the_topic() -> None:
    subs = {"a": {"x"}, "b": {"x", "y"}}
    result = roundrobin_assign(subs, {"x": 2, "y": 2}, {})
    check_complete_and_exclusive(subs, {"x": 2, "y": 2}, result)
    assert result["b"] >= {("y", 0), ("y", 1)}


def test_missing_topics_and_no_members_contribute_nothing() -> None:
    for assign in ASSIGNORS.values():
        assert assign({"a": {"ghost"}}, {}, {}) == {"a": set()}
        assert assign({}, {"t": 4}, {}) == {}


def test_get_assignor_rejects_unknown_names_with_the_known_ones() -> None:
    assert get_assignor("range") is range_assign
    with pytest.raises(UnknownAssignorError, match="cooperative-sticky") as info:
        get_assignor("sticky")
    assert isinstance(info.value, InvalidArgumentError)


def moved(before: Assignment, after: Assignment) -> int:
    """Partitions whose owner changed (a partition of a removed member counts as moved)."""
    owner = {tp: m for m, tps in before.items() for tp in tps}
    return sum(1 for m, tps in after.items() for tp in tps if owner.get(tp) not in (None, m))


def test_sticky_join_moves_only_the_new_members_share() -> None:
    subs = {f"m{i}": {"t"} for i in range(3)}
    before = cooperative_sticky_assign(subs, {"t": 32}, {})
    assert sorted(len(v) for v in before.values()) == [10, 11, 11]
    subs["m3"] = {"t"}
    after = cooperative_sticky_assign(subs, {"t": 32}, before)
    check_complete_and_exclusive(subs, {"t": 32}, after)
    assert sorted(len(v) for v in after.values()) == [8, 8, 8, 8]
    # The newcomer needs 8: exactly 8 partitions change owner, and every old member keeps 8 of its own.
    assert moved(before, after) == 8
    for m in ("m0", "m1", "m2"):
        assert after[m] <= before[m]


def test_sticky_leave_moves_only_the_leavers_partitions() -> None:
    subs = {f"m{i}": {"t"} for i in range(4)}
    before = cooperative_sticky_assign(subs, {"t": 32}, {})
    del subs["m2"]
    after = cooperative_sticky_assign(subs, {"t": 32}, {m: before[m] for m in subs})
    check_complete_and_exclusive(subs, {"t": 32}, after)
    for m in subs:
        assert after[m] >= before[m]  # nobody loses anything
    assert sorted(len(v) for v in after.values()) == [10, 11, 11]


def test_sticky_ignores_invalid_and_double_claims() -> None:
    subs = {"a": {"t"}, "b": {"t"}}
    current = {"a": {("t", 0), ("t", 9), ("gone", 0)}, "b": {("t", 0), ("t", 1)}}
    result = cooperative_sticky_assign(subs, {"t": 4}, current)
    check_complete_and_exclusive(subs, {"t": 4}, result)
    assert ("t", 0) in result["a"] and ("t", 1) in result["b"]


subscriptions_st = st.dictionaries(
    st.sampled_from(["m0", "m1", "m2", "m3", "m4", "m5"]),
    st.sets(st.sampled_from(["x", "y", "z"]), min_size=1),
    max_size=6,
)
counts_st = st.fixed_dictionaries({"x": st.integers(0, 12), "y": st.integers(0, 5), "z": st.integers(0, 9)})


@settings(max_examples=200, derandomize=True)
@given(subs=subscriptions_st, counts=counts_st, name=st.sampled_from(sorted(ASSIGNORS)))
def test_every_assignor_is_complete_and_exclusive(subs: dict[str, set[str]], counts: dict[str, int], name: str) -> None:
    check_complete_and_exclusive(subs, counts, ASSIGNORS[name](subs, counts, {}))


@settings(max_examples=200, derandomize=True)
@given(subs=subscriptions_st, counts=counts_st, data=st.data())
def test_sticky_balances_members_with_the_same_subscription_and_keeps_a_balanced_assignment(
    subs: dict[str, set[str]], counts: dict[str, int], data: st.DataObject
) -> None:
    # Start from an arbitrary (possibly unbalanced, overlapping) previous assignment.
    every = sorted(all_partitions(counts, {"x", "y", "z"}))
    current = {m: set(data.draw(st.lists(st.sampled_from(every), max_size=10))) if every else set() for m in subs}
    result = cooperative_sticky_assign(subs, counts, current)
    check_complete_and_exclusive(subs, counts, result)
    classes: dict[frozenset[str], list[int]] = {}
    for m, topics in subs.items():
        classes.setdefault(frozenset(topics), []).append(len(result[m]))
    for sizes in classes.values():
        assert max(sizes) - min(sizes) <= 1, (subs, result)
    # Applied again to its own output, it moves nothing.
    assert cooperative_sticky_assign(subs, counts, result) == result


@settings(max_examples=200, derandomize=True)
@given(n=st.integers(1, 8), count=st.integers(0, 64), joiners=st.integers(1, 3))
def test_sticky_join_moves_the_minimum_with_one_topic(n: int, count: int, joiners: int) -> None:
    subs = {f"m{i}": {"t"} for i in range(n)}
    before = cooperative_sticky_assign(subs, {"t": count}, {})
    for j in range(joiners):
        subs[f"new{j}"] = {"t"}
    after = cooperative_sticky_assign(subs, {"t": count}, before)
    # Old members keep a subset of what they had; the minimum that must move is what the newcomers get.
    for m in before:
        assert after[m] <= before[m]
    assert moved(before, after) == sum(len(after[f"new{j}"]) for j in range(joiners))
    sizes = [len(v) for v in after.values()]
    assert max(sizes) - min(sizes) <= 1
