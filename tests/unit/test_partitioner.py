"""lkstream.broker.partitioner: Kafka-compatible key hashing and sticky keyless routing."""

from __future__ import annotations

import pytest

from lkstream.broker.partitioner import StickyPartitioner, _key_hash, partition_for_key

# Kafka's Java client, org.apache.kafka.common.utils.UtilsTest#testMurmur2: murmur2(key) as a signed int.
JAVA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]

# kafka-python / aiokafka test_partitioner: partition among 1000, "compared with output from
# Kafka's org.apache.kafka.clients.producer.Partitioner".
JAVA_PARTITIONS_OF_1000 = [
    (b"", 681),
    (b"a", 524),
    (b"ab", 434),
    (b"abc", 107),
    (b"123456789", 566),
    (b"\x00 ", 742),
]


@pytest.mark.parametrize(("key", "signed_hash"), JAVA_MURMUR2)
def test_key_hash_is_javas_murmur2_made_positive(key: bytes, signed_hash: int) -> None:
    assert _key_hash(key) == signed_hash & 0x7FFFFFFF


@pytest.mark.parametrize(("key", "signed_hash"), JAVA_MURMUR2)
@pytest.mark.parametrize("partitions", [1, 3, 12, 50, 1000])
def test_partition_for_key_matches_kafkas_built_in_partitioner(key: bytes, signed_hash: int, partitions: int) -> None:
    # BuiltInPartitioner.partitionForKey: Utils.toPositive(Utils.murmur2(key)) % numPartitions
    assert partition_for_key(key, partitions) == (signed_hash & 0x7FFFFFFF) % partitions


@pytest.mark.parametrize(("key", "partition"), JAVA_PARTITIONS_OF_1000)
def test_partition_for_key_matches_java_client_vectors(key: bytes, partition: int) -> None:
    assert partition_for_key(key, 1000) == partition


def test_partition_for_key_is_stable_and_in_range() -> None:
    keys = [f"key-{i}".encode() for i in range(500)]
    first = [partition_for_key(k, 7) for k in keys]
    assert first == [partition_for_key(k, 7) for k in keys]
    assert set(first) == set(range(7))  # 500 keys reach every partition


def test_non_ascii_and_long_keys_hash_without_error() -> None:
    assert 0 <= partition_for_key(b"\xa4", 10) < 10
    assert 0 <= partition_for_key(b"\x81" * 1000, 10) < 10


def test_sticky_partitioner_moves_round_robin_one_step_per_call() -> None:
    sticky = StickyPartitioner()
    assert [sticky.next(3) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_sticky_partitioner_stays_in_range_when_the_count_changes() -> None:
    sticky = StickyPartitioner()
    picks = [sticky.next(n) for n in (5, 2, 9, 1, 4)]
    assert all(0 <= p < n for p, n in zip(picks, (5, 2, 9, 1, 4), strict=True))
