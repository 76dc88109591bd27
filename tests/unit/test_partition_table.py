"""A new topic's partitions are built at their first use (issue 12, finding 9).

A 4,000-partition topic used to be 120,000 objects the garbage collector tracks, built by the
create; every full collection then held the GIL over all of them. These tests pin the rules
of the lazy table: nothing built by a create, each partition built once and never after its
topic is deleted, and every observer (describe, metrics, waits, limits) seeing an unbuilt
partition as the empty partition it is.
"""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from lkstream import Broker
from lkstream.broker.metrics import BrokerMetrics
from lkstream.broker.partition_table import EMPTY_STATS, PartitionTable
from lkstream.errors import BrokerClosedError, PartitionLimitError

PARTITIONS = 500


def _opened(broker: Broker, topic: str) -> list[int]:
    return [pid for pid in range(broker.partitions_for(topic)) if broker.opened_partition(topic, pid) is not None]


def test_create_builds_no_partition_and_adds_almost_no_tracked_objects(tmp_path: Path) -> None:
    with Broker(persist_dir=str(tmp_path / "d"), max_partitions=10 * PARTITIONS) as broker:
        gc.collect()
        before = len(gc.get_objects())
        broker.create_topic("big", PARTITIONS)
        gc.collect()
        added = len(gc.get_objects()) - before
        assert _opened(broker, "big") == []
        # One open partition is about 30 tracked objects; a slot is none.
        assert added < PARTITIONS, f"{added} tracked objects for {PARTITIONS} unopened partitions"


def test_first_use_builds_only_that_partition_and_describe_reports_true_offsets(tmp_path: Path) -> None:
    with Broker(persist_dir=str(tmp_path / "d")) as broker:
        broker.create_topic("t", 6)
        broker.produce_many_sync("t", [(None, b"a"), (None, b"b")], partition=4)
        assert _opened(broker, "t") == [4]
        stats = broker.describe_topic("t").partitions
        assert [s.high_watermark for s in stats] == [0, 0, 0, 0, 2, 0]
        assert stats[0] == EMPTY_STATS
        assert broker.bounds("t", 1) == (0, 0)  # a read builds it: an empty log, as reported
        assert broker.describe_topic("t").partitions[1] == EMPTY_STATS


def test_an_unbuilt_partition_reports_what_a_built_empty_one_reports(tmp_path: Path) -> None:
    with Broker(persist_dir=str(tmp_path / "d")) as broker:
        broker.create_topic("t", 1)
        assert broker.describe_topic("t").partitions[0] == EMPTY_STATS
        assert broker.partition("t", 0).stats() == EMPTY_STATS


def test_a_metrics_scrape_builds_no_partition(tmp_path: Path) -> None:
    with Broker(persist_dir=str(tmp_path / "d")) as broker:
        broker.create_topic("t", 3)
        broker.produce_many_sync("t", [(None, b"a")], partition=1)
        metrics = BrokerMetrics(broker)
        text = generate_latest(metrics.registry).decode()
        assert 'lk_partition_next_offset{partition="2",topic="t"} 0.0' in text
        assert 'lk_partition_next_offset{partition="1",topic="t"} 1.0' in text
        assert _opened(broker, "t") == [1]
        metrics.close()


def test_lazy_partitions_count_against_max_partitions(tmp_path: Path) -> None:
    with Broker(persist_dir=str(tmp_path / "d"), max_partitions=10) as broker:
        broker.create_topic("a", 8)
        with pytest.raises(PartitionLimitError):
            broker.create_topic("b", 3)


def test_a_partition_is_built_once_under_concurrent_first_uses() -> None:
    built: list[int] = []
    gate = threading.Barrier(8)

    def build(pid: int) -> object:
        built.append(pid)
        return object()

    table = PartitionTable("t", 4, build)  # type: ignore[arg-type]
    seen: list[object] = []

    def use() -> None:
        gate.wait()
        seen.append(table[2])

    threads = [threading.Thread(target=use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert built == [2]
    assert len({id(p) for p in seen}) == 1


def test_no_partition_is_built_after_its_topic_is_deleted(tmp_path: Path) -> None:
    """A caller that looked the topic up before the delete must not build a log on the
    name's directory, which a new topic of the same name may own by then."""
    with Broker(persist_dir=str(tmp_path / "d")) as broker:
        broker.create_topic("t", 2)
        table = broker._topics["t"].partitions
        broker.delete_topic("t")
        with pytest.raises(BrokerClosedError):
            table[0]
        broker.create_topic("t", 2)
        broker.produce_many_sync("t", [(None, b"new")], partition=0)
        with pytest.raises(BrokerClosedError):
            table[1]
        assert [r.value for r in broker.read_from("t", 0, 0)] == [b"new"]


def test_delete_of_a_never_used_topic_removes_every_directory(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with Broker(persist_dir=str(data)) as broker:
        broker.create_topic("t", 50)
        broker.delete_topic("t")
        broker.settle_trash()
        assert list((data / "topics").iterdir()) == []
        trash = data / "trash"
        assert not trash.exists() or list(trash.iterdir()) == []


def test_grown_partitions_join_the_same_table(tmp_path: Path) -> None:
    with Broker(persist_dir=str(tmp_path / "d")) as broker:
        broker.create_topic("t", 2)
        table = broker._topics["t"].partitions
        broker.create_partitions("t", 4)
        assert broker._topics["t"].partitions is table
        broker.produce_many_sync("t", [(None, b"x")], partition=0)
        assert table.peek(0) is broker.partition("t", 0)
        assert [s.high_watermark for s in broker.describe_topic("t").partitions] == [1, 0, 0, 0]
