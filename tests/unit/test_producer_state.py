"""Idempotent-producer state of a partition: duplicates, sequences, epochs, rebuild after restart."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from lkstream import Broker
from lkstream.errors import CorruptRecordError, OutOfOrderSequenceError, ProducerFencedError, ProducerStateLimitError
from lkstream.storage.clock import ManualClock
from lkstream.storage.log import LogConfig, PartitionLog
from lkstream.storage.producer_ids import FILE_NAME, ProducerIdAllocator
from lkstream.storage.producers import (
    SNAPSHOT_NAME,
    ProducerFields,
    ProducerStateBudget,
    ProducerStateTable,
    next_sequence,
    producer_fields,
)

HOUR_MS = 3_600_000


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


# -- issue 28, finding 7: remembered by time, bounded by a budget that refuses, never forgets early ---


def _table(clock: ManualClock, budget: ProducerStateBudget | None = None, expiration_ms: int = HOUR_MS) -> Any:
    return ProducerStateTable(budget, expiration_ms=expiration_ms, clock=clock.now_ms)


def test_a_producer_is_remembered_whatever_1100_others_append_within_the_expiry() -> None:
    clock = ManualClock()
    table = _table(clock)
    table.record(ProducerFields(1, 0, 0, 9), 0, 9)
    for pid in range(2, 1102):  # the 1,100 short-lived producers
        clock.advance(1)
        table.record(ProducerFields(pid, 0, 0, 0), pid + 8, pid + 8)
    assert table.check(ProducerFields(1, 0, 0, 9)) == (0, 9)  # the retry is answered, not written again


def test_a_producer_is_forgotten_once_silent_for_the_expiry_and_then_starts_anywhere() -> None:
    clock = ManualClock()
    table = _table(clock)
    table.record(ProducerFields(1, 0, 0, 0), 0, 0)
    clock.advance(HOUR_MS - 1)
    with pytest.raises(OutOfOrderSequenceError):
        table.check(ProducerFields(1, 0, 50, 50))  # still known a millisecond before
    clock.advance(1)
    assert table.expire() == 1 and len(table) == 0
    assert table.check(ProducerFields(1, 0, 50, 50)) is None  # unknown again: any sequence, as Kafka


def test_a_full_budget_refuses_a_new_producer_and_keeps_every_unexpired_one() -> None:
    clock, budget = ManualClock(), ProducerStateBudget(3)
    first, second = _table(clock, budget), _table(clock, budget)  # two partitions share the budget
    first.record(ProducerFields(1, 0, 0, 0), 0, 0)
    first.record(ProducerFields(2, 0, 0, 0), 1, 1)
    second.record(ProducerFields(3, 0, 0, 0), 0, 0)
    with pytest.raises(ProducerStateLimitError, match="max_producer_states=3") as refused:
        second.check(ProducerFields(4, 0, 0, 0))
    assert refused.value.retriable
    assert first.check(ProducerFields(1, 0, 0, 0)) == (0, 0)  # known producers are never refused
    assert second.check(ProducerFields(3, 0, 1, 1)) is None
    clock.advance(HOUR_MS)
    assert second.check(ProducerFields(4, 0, 0, 0)) is None  # room once the partition's own states expired
    assert budget.used == 2


def test_the_maintenance_sweep_frees_states_of_partitions_that_no_longer_append() -> None:
    clock, budget = ManualClock(), ProducerStateBudget(1)
    idle, busy = _table(clock, budget), _table(clock, budget)
    idle.record(ProducerFields(1, 0, 0, 0), 0, 0)
    clock.advance(HOUR_MS)
    with pytest.raises(ProducerStateLimitError):
        busy.check(ProducerFields(2, 0, 0, 0))  # the expired state is another partition's
    assert idle.expire() == 1
    assert busy.check(ProducerFields(2, 0, 0, 0)) is None


def test_states_keep_their_append_times_across_a_reopen(tmp_path: Path) -> None:
    clock = ManualClock()
    config = LogConfig(producer_id_expiration_ms=HOUR_MS)
    log = PartitionLog(str(tmp_path), "t", 0, config, clock=clock)
    first = log.append(idempotent_batch(1, 0, 0))
    clock.advance(HOUR_MS // 2)
    log.append(idempotent_batch(2, 0, 0))
    log.close()
    clock.advance(HOUR_MS // 2)  # producer 1 is now an hour silent, producer 2 half an hour
    reopened = PartitionLog(str(tmp_path), "t", 0, config, clock=clock)
    try:
        assert 1 not in reopened.producers and 2 in reopened.producers
        assert reopened.append(idempotent_batch(2, 0, 0)).duplicate
        assert not reopened.append(idempotent_batch(1, 0, 0)).duplicate  # forgotten: written again, as Kafka
        assert first.base_offset == 0
    finally:
        reopened.close()


@pytest.mark.parametrize(
    ("reopen_after_ms", "remembered"), [(HOUR_MS + 5 * 60_000, True), (HOUR_MS + 11 * 60_000, False)]
)
def test_replayed_batches_are_dated_by_their_segments_last_write_not_their_own_timestamps(
    tmp_path: Path, reopen_after_ms: int, remembered: bool
) -> None:
    clock = ManualClock()
    start = clock.now_ms()
    config = LogConfig(producer_id_expiration_ms=HOUR_MS)
    log = PartitionLog(str(tmp_path), "t", 0, config, clock=clock)
    log.append(idempotent_batch(1, 0, 0))  # its own timestamp is from 2023-11 (a backfill's old records)
    log.flush()  # a crash after the fsync: no snapshot, the batch is known only from its header
    written = start + 10 * 60_000
    segment = tmp_path / "00000000000000000000.seg"
    os.utime(segment, ns=(written * 1_000_000, written * 1_000_000))
    clock.advance(reopen_after_ms)
    reopened = PartitionLog(str(tmp_path), "t", 0, config, clock=clock)
    try:
        assert (1 in reopened.producers) is remembered  # an hour after the segment's last write, not its records
    finally:
        reopened.close()
        log._closed = True  # the "crashed" instance


def test_a_version_1_snapshot_is_read_and_its_producers_dated_when_read() -> None:
    clock = ManualClock()
    body = struct.pack(">4sHqI", b"LKPS", 1, 10, 1) + struct.pack(">qhB", 7, 0, 1) + struct.pack(">iiqq", 0, 9, 0, 9)
    table = _table(clock)
    assert table.load_snapshot(body + struct.pack(">I", crc32c.crc32c(body))) == 10
    assert table.check(ProducerFields(7, 0, 0, 9)) == (0, 9)
    clock.advance(HOUR_MS)
    assert table.check(ProducerFields(7, 0, 0, 9)) is None


def test_closing_a_log_gives_its_states_back_to_the_budget(tmp_path: Path) -> None:
    budget = ProducerStateBudget(10)
    log = PartitionLog(str(tmp_path), "t", 0, producer_budget=budget)
    log.append(idempotent_batch(1, 0, 0))
    log.append(idempotent_batch(2, 0, 0))
    assert budget.used == 2
    log.close()
    assert budget.used == 0
    reopened = PartitionLog(str(tmp_path), "t", 0, producer_budget=budget)
    assert budget.used == 2  # rebuilt, counted again
    reopened.close()


def test_last_batch_offsets_name_each_producers_newest_batch() -> None:
    table = ProducerStateTable()
    table.record(ProducerFields(1, 0, 0, 1), 0, 1)
    table.record(ProducerFields(2, 0, 0, 0), 2, 2)
    table.record(ProducerFields(1, 0, 2, 3), 3, 4)
    assert table.last_batch_offsets() == {1: 4, 2: 2}


def test_broker_expires_silent_producers_and_refuses_past_max_producer_states(tmp_path: Path) -> None:
    clock = ManualClock()
    with Broker(
        persist_dir=str(tmp_path), max_producer_states=2, producer_id_expiration_ms=HOUR_MS, clock=clock
    ) as broker:
        broker.create_topic("t", 1)
        ids = [broker.init_producer_id()[0] for _ in range(3)]
        broker.produce_batch_sync("t", 0, idempotent_batch(ids[0], 0, 0))
        broker.produce_batch_sync("t", 0, idempotent_batch(ids[1], 0, 0))
        with pytest.raises(ProducerStateLimitError):
            broker.produce_batch_sync("t", 0, idempotent_batch(ids[2], 0, 0))
        assert broker.describe_topic("t").partitions[0].next_offset == 4  # the refused batch wrote nothing
        clock.advance(HOUR_MS)
        assert broker.expire_producers() == 2
        assert broker.produce_batch_sync("t", 0, idempotent_batch(ids[2], 0, 0)) == (4, 5)


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
