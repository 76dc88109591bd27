"""Issue 12, finding 5: a commit above the high watermark is refused wherever commits enter.

``CommitOffset(offset=10**15)`` used to be accepted; every later commit then "moved backward",
so the group was wedged. The check sits in the coordinator (every broker-side commit passes it)
and in the embedded consumer's private-store path.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lkstream import Broker, Consumer, OffsetStore
from lkstream.errors import OffsetOutOfRangeError

HUGE = 10**15


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(persist_dir=str(tmp_path / "data"))
    b.create_topic("t", 2)
    b.produce_many_sync("t", [(None, b"a"), (None, b"b"), (None, b"c")], partition=0)
    yield b
    b.close()


def test_a_standalone_commit_above_the_high_watermark_is_refused(broker: Broker) -> None:
    with pytest.raises(OffsetOutOfRangeError) as info:
        broker.commit_offsets("g", {("t", 0): HUGE})
    assert (info.value.offset, info.value.latest, info.value.earliest) == (HUGE, 3, 0)
    assert broker.groups.fetch_committed("g") == {}


def test_a_commit_at_the_high_watermark_is_accepted(broker: Broker) -> None:
    broker.commit_offsets("g", {("t", 0): 3, ("t", 1): 0})
    assert broker.groups.fetch_committed("g") == {("t", 0): 3, ("t", 1): 0}


def test_one_partition_above_the_high_watermark_refuses_the_whole_commit(broker: Broker) -> None:
    with pytest.raises(OffsetOutOfRangeError):
        broker.commit_offsets("g", {("t", 0): 2, ("t", 1): 1})
    assert broker.groups.fetch_committed("g") == {}


def test_a_member_commit_above_the_high_watermark_is_refused(broker: Broker) -> None:
    joined = broker.join_group("g", ["t"])
    broker.heartbeat("g", joined.member_id)
    with pytest.raises(OffsetOutOfRangeError):
        broker.commit_offsets("g", {("t", 0): 4}, member_id=joined.member_id, generation=joined.generation)
    broker.commit_offsets("g", {("t", 0): 3}, member_id=joined.member_id, generation=joined.generation)
    assert broker.groups.fetch_committed("g") == {("t", 0): 3}


def test_a_group_wedged_by_an_impossible_offset_recovers_on_its_next_commit(broker: Broker) -> None:
    """Written before the check existed: the next valid commit may move it back to the log."""
    broker.offset_store.commit("g", "t", 0, HUGE)
    broker.commit_offsets("g", {("t", 0): 2})
    assert broker.groups.fetch_committed("g") == {("t", 0): 2}


def test_the_consumers_commit_above_the_high_watermark_is_refused(broker: Broker) -> None:
    consumer = Consumer(broker, group="g", auto_commit=False)
    consumer.assign([("t", 0)])
    with pytest.raises(OffsetOutOfRangeError):
        consumer.commit({("t", 0): HUGE})
    assert consumer.committed("t", 0) is None


def test_a_private_offset_store_refuses_a_commit_above_the_high_watermark(broker: Broker, tmp_path: Path) -> None:
    with OffsetStore(str(tmp_path / "mine")) as store:
        consumer = Consumer(broker, group="g", offset_store=store, auto_commit=False)
        consumer.subscribe("t")
        with pytest.raises(OffsetOutOfRangeError):
            consumer.commit({("t", 0): HUGE})
        consumer.commit({("t", 0): 3})
        assert store.read_committed("g", "t", 0) == 3
        consumer.close()
