"""A Produce's fields are checked as Kafka checks them (issue 28, finding 11).

``acks`` other than -1, 0 and 1 was accepted (and the records written); Kafka handles nothing of
such a request and answers INVALID_REQUIRED_ACKS (21) on every partition the caller may write
of a topic that exists. A negative ``timeout_ms`` is accepted, as Kafka accepts it.
"""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from lkstream import Broker
from lkstream.format.codec import encode_batch
from lkstream.kafka.protocol import ApiKey
from tests.security.kafka_raw import RawKafka


def produce(bootstrap: str, acks: int, topics: list[str], *, timeout: int = 5_000, version: int = 8) -> Any:
    batch = bytes(encode_batch([(b"k", b"v")]))
    with RawKafka(bootstrap) as kafka:
        return kafka.call(
            ApiKey.PRODUCE,
            version,
            transactional_id=None,
            acks=acks,
            timeout=timeout,
            topic_data=[{"name": t, "partition_data": [{"index": 0, "records": batch}]} for t in topics],
        )


@pytest.mark.parametrize("acks", [5, 2, -2, 32767, -32768])
def test_acks_outside_minus_one_zero_one_write_nothing_and_answer_invalid_required_acks(
    kafka_broker: Broker, kafka_bootstrap: str, acks: int
) -> None:
    kafka_broker.create_topic("orders", 1)
    answer = produce(kafka_bootstrap, acks, ["orders", "never.created"])
    codes = {t.name: [p.error_code for p in t.partition_responses] for t in answer.responses}
    assert codes == {
        "orders": [ErrorCode.invalid_required_acks],
        "never.created": [ErrorCode.unknown_topic_or_partition],  # nothing of the request is handled
    }
    assert "acks must be -1, 0 or 1" in answer.responses[0].partition_responses[0].error_message
    assert kafka_broker.describe_topic("orders").partitions[0].next_offset == 0
    assert kafka_broker.list_topics() == ["orders"]


@pytest.mark.parametrize("acks", [-1, 1])
def test_valid_acks_with_a_negative_timeout_are_accepted_as_kafka_does(
    kafka_broker: Broker, kafka_bootstrap: str, acks: int
) -> None:
    answer = produce(kafka_bootstrap, acks, ["orders"], timeout=-1)
    partition = answer.responses[0].partition_responses[0]
    assert (partition.error_code, partition.base_offset) == (0, 0)
