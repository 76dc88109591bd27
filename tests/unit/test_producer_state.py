"""Idempotent-producer state of a partition: duplicates, sequences, epochs, rebuild after restart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from lkstream import Broker
from lkstream.errors import CorruptRecordError, OutOfOrderSequenceError, ProducerFencedError
from lkstream.storage.log import LogConfig, PartitionLog
from lkstream.storage.producer_ids import FILE_NAME, ProducerIdAllocator
from lkstream.storage.producers import (
    SNAPSHOT_NAME,
    ProducerFields,
    ProducerStateTable,
    next_sequence,
    producer_fields,
)


def idempotent_batch(producer_id: int, epoch: int, sequence: int, count: int = 2) -> bytearray:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, timestamp=1_700_000_000_000, key=b"k", value=f"v{sequence + i}".encode(), headers=[])
    return bytearray(builder.build())


def test_producer_fields_reads_id_epoch_and_sequence_span() -> None:
    assert producer_fields(idempotent_batch(7, 3, 10, count=5)) == ProducerFields(7, 3, 10, 14)
    assert producer_fields(idempotent_batch(-1, -1, -1)) is None


def test_sequence_wraps_after_int32_max_to_zero() -> None:
    assert next_sequence(2**31 - 1, 1) == 0
    assert next_sequence(2**31 - 2, 3) == 1
    assert next_sequence(5, 1) == 6


def test_log_answers_a_duplicate_batch_with_its_original_offsets(tmp_path: Path) -> None:
    log = PartitionLog(str(tmp_path), "t", 0)
    try:
        first = log.append(idempotent_batch(1, 0, 0))
        log.append(idempotent_batch(1, 0, 2))
        retry = log.append(idempotent_batch(1, 0, 0))
        assert retry.duplicate and (retry.base_offset, retry.last_offset) == (first.base_offset, first.last_offset)
        assert log.next_offset == 4
    finally:
        log.close()


def test_log_refuses_an_out_of_order_sequence_and_writes_nothing(tmp_path: Path) -> None:
    log = PartitionLog(str(tmp_path), "t", 0)
    try:
        log.append(idempotent_batch(1, 0, 0))
        with pytest.raises(OutOfOrderSequenceError) as caught:
            log.append(idempotent_batch(1, 0, 5))
        assert (caught.value.sequence, caught.value.expected) == (5, 2)
        assert log.next_offset == 2
    finally:
        log.close()


def test_log_fences_an_older_epoch_and_accepts_a_new_epoch_from_zero(tmp_path: Path) -> None:
    log = PartitionLog(str(tmp_path), "t", 0)
    try:
        log.append(idempotent_batch(1, 1, 0))
        with pytest.raises(ProducerFencedError):
            log.append(idempotent_batch(1, 0, 2))
        assert not log.append(idempotent_batch(1, 2, 0)).duplicate
        assert log.next_offset == 4
    finally:
        log.close()


def test_an_unknown_producer_may_start_at_any_sequence(tmp_path: Path) -> None:
    log = PartitionLog(str(tmp_path), "t", 0)
    try:
        assert log.append(idempotent_batch(9, 0, 40)).base_offset == 0
    finally:
        log.close()


@pytest.mark.parametrize("clean_close", [True, False])
def test_state_survives_reopen_from_snapshot_and_header_replay(tmp_path: Path, clean_close: bool) -> None:
    config = LogConfig(segment_max_bytes=300)  # a roll every few batches: snapshot + replay both used
    log = PartitionLog(str(tmp_path), "t", 0, config)
    results = [log.append(idempotent_batch(1, 0, seq)) for seq in range(0, 20, 2)]
    if clean_close:
        log.close()
    else:
        log.flush()  # a crash after the fsync: no close-time snapshot
    reopened = PartitionLog(str(tmp_path), "t", 0, config)
    try:
        retry = reopened.append(idempotent_batch(1, 0, 18))
        assert retry.duplicate and retry.base_offset == results[-1].base_offset
        with pytest.raises(OutOfOrderSequenceError):
            reopened.append(idempotent_batch(1, 0, 30))
        assert reopened.append(idempotent_batch(1, 0, 20)).base_offset == 20
    finally:
        reopened.close()
        if not clean_close:
            log._closed = True  # the "crashed" instance: its files are gone with the process


def test_a_damaged_snapshot_is_ignored_and_the_log_replayed(tmp_path: Path) -> None:
    log = PartitionLog(str(tmp_path), "t", 0)
    log.append(idempotent_batch(1, 0, 0))
    log.close()
    (tmp_path / SNAPSHOT_NAME).write_bytes(b"garbage")
    reopened = PartitionLog(str(tmp_path), "t", 0)
    try:
        assert reopened.append(idempotent_batch(1, 0, 0)).duplicate
    finally:
        reopened.close()


def test_snapshot_round_trips_and_rejects_a_flipped_byte() -> None:
    table = ProducerStateTable()
    table.record(ProducerFields(5, 2, 0, 9), 100, 109)
    data = table.encode_snapshot(110)
    loaded, offset = ProducerStateTable.decode_snapshot(data)
    assert offset == 110 and loaded.check(ProducerFields(5, 2, 0, 9)) == (100, 109)
    damaged = bytearray(data)
    damaged[20] ^= 1
    with pytest.raises(CorruptRecordError):
        ProducerStateTable.decode_snapshot(bytes(damaged))


def test_table_forgets_the_least_recent_producer_beyond_its_bound() -> None:
    table = ProducerStateTable(max_producers=2)
    for pid in (1, 2, 3):
        table.record(ProducerFields(pid, 0, 0, 0), pid, pid)
    assert len(table) == 2
    # Producer 1 was forgotten: any sequence is accepted again (as Kafka does for an unknown producer).
    assert table.check(ProducerFields(1, 0, 50, 50)) is None
    with pytest.raises(OutOfOrderSequenceError):
        table.check(ProducerFields(3, 0, 50, 50))


def test_producer_ids_are_never_reused_across_restarts(tmp_path: Path) -> None:
    first = ProducerIdAllocator(str(tmp_path), block_size=3)
    seen = [first.allocate() for _ in range(4)]
    second = ProducerIdAllocator(str(tmp_path), block_size=3)  # a crash: the rest of the block is skipped
    seen += [second.allocate() for _ in range(4)]
    assert len(set(seen)) == len(seen)
    assert min(seen[4:]) > max(seen[:4])


def test_a_damaged_producer_id_file_fails_loudly(tmp_path: Path) -> None:
    ProducerIdAllocator(str(tmp_path)).allocate()
    path = tmp_path / FILE_NAME
    path.write_bytes(b"\x00" * 12)
    with pytest.raises(CorruptRecordError):
        ProducerIdAllocator(str(tmp_path))


def test_broker_dedups_through_produce_batch_in_sync_mode(tmp_path: Path) -> None:
    with Broker(persist_dir=str(tmp_path), fsync_mode="sync") as broker:
        producer_id, epoch = broker.init_producer_id()
        assert epoch == 0
        broker.create_topic("t", 1)
        assert broker.produce_batch_sync("t", 0, idempotent_batch(producer_id, 0, 0)) == (0, 1)
        assert broker.produce_batch_sync("t", 0, idempotent_batch(producer_id, 0, 0)) == (0, 1)
        assert broker.describe_topic("t").partitions[0].next_offset == 2
        assert broker.init_producer_id()[0] != producer_id
    assert os.path.exists(tmp_path / "topics" / "t" / "part0" / SNAPSHOT_NAME)
