"""The auto-create budget: one token bucket per caller (issue 28, finding 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lkstream import Broker
from lkstream.broker.autocreate import AutoCreateBudget
from lkstream.errors import AutoCreateThrottledError, PartitionLimitError, UnknownTopicError


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_caller_gets_its_burst_then_its_rate_and_others_keep_theirs() -> None:
    clock = Clock()
    budget = AutoCreateBudget(rate_per_s=2, burst=3, clock=clock)
    for _ in range(3):
        budget.take("alice", 1, "t")
    with pytest.raises(AutoCreateThrottledError) as refused:
        budget.take("alice", 1, "t")
    assert refused.value.retry_after_ms == 500 and refused.value.retriable
    budget.take("bob", 3, "t")  # another caller: a bucket of its own
    clock.now = 0.5
    budget.take("alice", 1, "t")  # refilled at 2 per second
    with pytest.raises(AutoCreateThrottledError):
        budget.take("alice", 1, "t")


def test_a_full_bucket_lets_one_topic_larger_than_the_burst_through() -> None:
    clock = Clock()
    budget = AutoCreateBudget(rate_per_s=1, burst=2, clock=clock)
    budget.take("alice", 5, "wide")  # a default partition count above the burst still works, slowly
    with pytest.raises(AutoCreateThrottledError) as refused:
        budget.take("alice", 5, "wide")
    assert refused.value.retry_after_ms == 5_000  # back to a full bucket (2) from -3


def test_the_table_of_callers_is_bounded_and_drops_the_least_recent() -> None:
    budget = AutoCreateBudget(rate_per_s=1, burst=1, clock=Clock(), max_requesters=2)
    for caller in ("a", "b", "c"):
        budget.take(caller, 1, "t")
    assert len(budget) == 2
    budget.take("a", 1, "t")  # "a" was dropped: a full bucket again


def test_broker_auto_create_takes_from_the_callers_budget_and_gives_back_what_it_did_not_create(
    tmp_path: Path,
) -> None:
    with Broker(persist_dir=str(tmp_path), auto_create_partitions_burst=2, auto_create_partitions_per_s=1) as broker:
        assert broker.auto_create_topic("a", requester="x") == 1
        assert broker.auto_create_topic("a", requester="x") == 1  # exists: takes nothing
        assert broker.auto_create_topic("b", requester="x") == 1
        with pytest.raises(AutoCreateThrottledError, match="auto_create_partitions_per_s=1"):
            broker.auto_create_topic("c", requester="x")
        assert "c" not in broker.list_topics()
        assert broker.auto_create_topic("c", requester="y") == 1
    with Broker(persist_dir=str(tmp_path / "full"), max_partitions=1) as broker:
        broker.create_topic("only", 1)
        for _ in range(3):  # refused by the limit: the budget is given back each time
            with pytest.raises(PartitionLimitError, match="partition limit reached"):
                broker.auto_create_topic("more", requester="x")
    off = Broker(persist_dir=str(tmp_path / "off"), auto_create_topics=False)
    try:
        with pytest.raises(UnknownTopicError):
            off.auto_create_topic("t", requester="x")
    finally:
        off.close()
