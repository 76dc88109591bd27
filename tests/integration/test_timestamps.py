"""OffsetsForTimestamp over the wire: `RemoteBroker.offsets_for_timestamp` and `lkstream consume --from-timestamp`."""

from __future__ import annotations

import pytest

import lkstream
from lkstream.client.remote import RemoteBroker
from lkstream.errors import UnknownTopicError
from lkstream.format.codec import encode_batch
from tests.integration.conftest import DaemonProcess
from tests.integration.test_cli_daemon import lkstream_cli

pytestmark = pytest.mark.timeout(120)

TOPIC = "events"
# Two batches in partition 0 (so a lookup lands inside a batch and across batches), one in partition 1.
P0_BATCHES = [[1_000, 2_000, 3_000], [4_000, 5_000]]
P1_BATCHES = [[1_500, 2_500, 3_500]]


def _produce(broker: RemoteBroker, partition: int, timestamps: list[int]) -> None:
    records = [(None, f"p{partition}-t{ts}".encode()) for ts in timestamps]
    broker.produce_batch_sync(TOPIC, partition, encode_batch(records, timestamps=timestamps))


def _seed(broker: RemoteBroker) -> None:
    broker.create_topic(TOPIC, 2)
    for batch in P0_BATCHES:
        _produce(broker, 0, batch)
    for batch in P1_BATCHES:
        _produce(broker, 1, batch)


def test_offsets_for_timestamp_before_middle_and_after(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        _seed(broker)
        assert broker.offsets_for_timestamp(TOPIC, 0) == {0: 0, 1: 0}  # before every record
        assert broker.offsets_for_timestamp(TOPIC, 2_000) == {0: 1, 1: 1}  # exact match / first newer
        assert broker.offsets_for_timestamp(TOPIC, 2_001) == {0: 2, 1: 1}
        assert broker.offsets_for_timestamp(TOPIC, 4_500) == {0: 4, 1: 3}  # p1: all older -> high watermark
        assert broker.offsets_for_timestamp(TOPIC, 10_000) == {0: 5, 1: 3}  # after every record
        assert broker.offsets_for_timestamp(TOPIC, 3_500, partitions=[1]) == {1: 2}
        assert broker.offsets_for_timestamp(TOPIC, 3_500, partitions=[0]) == {0: 3}


def test_offsets_for_timestamp_of_an_unknown_topic(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker, pytest.raises(UnknownTopicError, match="nope"):
        broker.offsets_for_timestamp("nope", 0)


def test_consume_from_timestamp_prints_only_the_later_records(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as broker:
        _seed(broker)
    done = lkstream_cli("consume", TOPIC, "--bootstrap", daemon.address, "--from-timestamp", "3000")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["p0-t3000", "p0-t4000", "p0-t5000", "p1-t3500"]

    done = lkstream_cli("consume", TOPIC, "--bootstrap", daemon.address, "--from-timestamp", "3000", "--partition", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["p1-t3500"]

    done = lkstream_cli("consume", TOPIC, "--bootstrap", daemon.address, "--from-timestamp", "99999")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


def test_consume_rejects_from_together_with_from_timestamp(daemon: DaemonProcess) -> None:
    done = lkstream_cli(
        "consume", TOPIC, "--bootstrap", daemon.address, "--from", "earliest", "--from-timestamp", "3000"
    )
    assert done.returncode == 2
    assert "mutually exclusive" in done.stderr
