"""Idempotent producers are remembered by time, not by count (issue 28, finding 7).

The daemon forgot the least recently appending producer of a partition once 1,024 others had
written to it: a batch acknowledged before 1,100 short-lived producers appended, then retried
(a lost answer), was written again. Kafka keeps a producer's state for
``producer.id.expiration.ms`` (a day) after its last write, whatever other producers do. Here a
real daemon's Kafka listener gets the raw protocol, exactly what a client sends on a retry: the
same batch bytes, same producer id, epoch and sequence.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode

from lkstream.kafka.protocol import ApiKey
from tests.integration.conftest import DaemonFactory, DaemonProcess, RestartDaemon, restart_daemon
from tests.security.kafka_raw import RawKafka

__all__ = ["restart_daemon"]  # the fixture, for the restart test

TOPIC = "orders"
OTHERS = 1_100


def idempotent_batch(producer_id: int, sequence: int, count: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, timestamp=None, key=b"k", value=f"{producer_id}-{sequence + i}".encode(), headers=[])
    return bytes(builder.build())


def init_producer(kafka: RawKafka) -> int:
    answer = kafka.call(ApiKey.INIT_PRODUCER_ID, 1, transactional_id=None, transaction_timeout=60_000)
    assert answer.error_code == 0
    return int(answer.producer_id)


def produce(kafka: RawKafka, batch: bytes) -> Any:
    answer = kafka.call(
        ApiKey.PRODUCE,
        8,
        transactional_id=None,
        acks=-1,
        timeout=10_000,
        topic_data=[{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}],
    )
    return answer.responses[0].partition_responses[0]


def log_end(kafka: RawKafka) -> int:
    answer = kafka.call(
        ApiKey.LIST_OFFSETS,
        1,
        replica_id=-1,
        topics=[{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
    )
    return int(answer.topics[0].partitions[0].offset)


def victim_then_others(daemon: DaemonProcess) -> tuple[bytes, int]:
    """The victim's 10-record batch (acknowledged), then 1,100 short-lived producers' batches."""
    with RawKafka(daemon.kafka_address) as kafka:
        victim = idempotent_batch(init_producer(kafka), 0, 10)
        first = produce(kafka, victim)
        assert first.error_code == 0
        for _ in range(OTHERS):
            assert produce(kafka, idempotent_batch(init_producer(kafka), 0, 1)).error_code == 0
        assert log_end(kafka) == 10 + OTHERS
    return victim, int(first.base_offset)


def assert_retry_is_a_duplicate(daemon: DaemonProcess, victim: bytes, base_offset: int) -> None:
    with RawKafka(daemon.kafka_address) as kafka:
        retry = produce(kafka, victim)
        assert (retry.error_code, retry.base_offset) == (0, base_offset), "the retried batch was not recognised"
        assert log_end(kafka) == 10 + OTHERS, "the retried batch was written again"


def test_a_retry_after_1100_other_producers_is_answered_with_its_original_offset(
    start_daemon: DaemonFactory,
) -> None:
    daemon = start_daemon()
    victim, base_offset = victim_then_others(daemon)
    assert_retry_is_a_duplicate(daemon, victim, base_offset)


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_the_state_of_1100_producers_survives_a_restart(
    start_daemon: DaemonFactory, restart_daemon: RestartDaemon, stop: str
) -> None:
    daemon = start_daemon(fsync_mode="sync")  # SIGKILL may take nothing acknowledged
    victim, base_offset = victim_then_others(daemon)
    if stop == "sigkill":
        daemon.kill()  # no close-time snapshot: the state comes back from the batch headers
    else:
        assert daemon.terminate() == 0
    assert_retry_is_a_duplicate(restart_daemon(daemon), victim, base_offset)


def test_a_full_producer_state_budget_refuses_new_producers_and_keeps_the_known_ones(
    start_daemon: DaemonFactory,
) -> None:
    daemon = start_daemon(max_producer_states=5)
    with RawKafka(daemon.kafka_address) as kafka:
        batches = [idempotent_batch(init_producer(kafka), 0, 1) for _ in range(6)]
        offsets = [int(produce(kafka, batch).base_offset) for batch in batches[:5]]
        refused = produce(kafka, batches[5])
        assert refused.error_code == ErrorCode.request_timed_out  # retriable: clients retry until room
        assert "max_producer_states=5" in refused.error_message
        assert log_end(kafka) == 5
        for batch, offset in zip(batches[:5], offsets, strict=True):
            retry = produce(kafka, batch)
            assert (retry.error_code, retry.base_offset) == (0, offset)
        assert log_end(kafka) == 5
