"""A compacted topic through the embedded broker (issue 24): keys required, DeleteRecords refused, cleaned by config."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lkstream import Broker
from lkstream.errors import InvalidArgumentError, PolicyViolationError
from lkstream.format.codec import encode_batch
from lkstream.storage.clock import ManualClock

from .support import FIXED_TS

HOUR_MS = 3_600_000
COMPACT = {"cleanup.policy": "compact"}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(FIXED_TS)


@pytest.fixture
def broker(tmp_path: Path, clock: ManualClock) -> Iterator[Broker]:
    with Broker(persist_dir=str(tmp_path / "data"), log_cleaner_backoff_ms=3_600_000, clock=clock) as opened:
        yield opened


def test_a_compacted_topic_refuses_a_record_without_a_key(broker: Broker) -> None:
    broker.create_topic("c", 1, configs=COMPACT)
    broker.create_topic("plain", 1)
    with pytest.raises(InvalidArgumentError, match="record 1 has no key"):
        broker.produce_many_sync("c", [(b"k", b"v"), (None, b"v")])
    with pytest.raises(InvalidArgumentError, match="rejected producer batch: record 0 has no key"):
        broker.produce_batch_sync("c", 0, encode_batch([(None, b"v")]))
    assert broker.partition("c", 0).high_watermark == 0, "nothing of a refused call was written"
    broker.produce_many_sync("c", [(b"k", None)])  # a tombstone has a key
    broker.produce_many_sync("plain", [(None, b"v")])
    broker.alter_topic_configs("plain", set=COMPACT)
    with pytest.raises(InvalidArgumentError, match="has no key"):
        broker.produce_many_sync("plain", [(None, b"v")])


def test_delete_records_needs_delete_in_the_cleanup_policy(broker: Broker) -> None:
    broker.create_topic("c", 1, configs=COMPACT)
    broker.create_topic("both", 1, configs={"cleanup.policy": "compact,delete"})
    for topic in ("c", "both"):
        broker.produce_many_sync(topic, [(b"k", f"{n}".encode()) for n in range(5)])
    with pytest.raises(PolicyViolationError, match=r"cleanup\.policy has no 'delete'"):
        broker.delete_records("c", {0: 3})
    assert broker.delete_records("both", {0: 3}) == {0: 3}


def test_segment_ms_and_the_cleaner_compact_a_quiet_topic(broker: Broker, clock: ManualClock) -> None:
    configs = {**COMPACT, "segment.ms": str(HOUR_MS), "delete.retention.ms": "0"}
    broker.create_topic("c", 1, configs=configs)
    for n in range(50):
        broker.produce_many_sync("c", [(f"k{n % 5}".encode(), f"{n}".encode()), (b"gone", f"{n}".encode())])
    broker.produce_many_sync("c", [(b"gone", None)])
    assert broker.roll_quiet_partitions() == 0, "the active segment is not an hour old"
    clock.advance(HOUR_MS)
    assert broker.roll_quiet_partitions() == 1
    assert broker.cleaner is not None
    stats = broker.cleaner.run_once()
    assert stats is not None and stats.records_kept < stats.records_read
    records = broker.read_from("c", 0, 0, max_bytes=1 << 20)
    latest = {f"k{i}".encode(): f"{45 + i}".encode() for i in range(5)}
    # The log's last record (the tombstone) stays while it is the last: a Kafka client reaches the end.
    assert [(r.key, r.value) for r in records] == [*latest.items(), (b"gone", None)], records
    assert records[-1].offset == 100
    assert broker.describe_topic("c").partitions[0].dirty_ratio == 0.0
    assert broker.describe_topic("c").partitions[0].next_offset == 101, "offsets never change"
    # Once a record follows it and its segment is sealed, the next pass removes the tombstone like
    # any other (a pass the dirty ratio schedules: any dirty byte here).
    broker.produce_many_sync("c", [(b"k0", b"later")])
    clock.advance(HOUR_MS)
    assert broker.roll_quiet_partitions() == 1
    broker.alter_topic_configs("c", set={"min.cleanable.dirty.ratio": "0"})
    assert broker.cleaner.run_once() is not None
    records = broker.read_from("c", 0, 0, max_bytes=1 << 20)
    assert [(r.offset, r.key, r.value) for r in records][-2:] == [(98, b"k4", b"49"), (101, b"k0", b"later")]
