"""Golden test vectors for the on-disk/wire format (the ones printed in docs/format.md).

Each vector was produced by the real code (``encode_batch`` with a fixed
timestamp, ``stamp_base_offset``, ``OffsetIndex``, ``Checkpoint.encode``,
``OffsetStore.commit``) and is pinned here as hex. If one of these tests fails,
the bytes LKSTREAM writes have changed: that breaks every existing data
directory and every client, so fix the code, or version the format and update
docs/format.md together with these constants.
"""

from __future__ import annotations

import os
from pathlib import Path

import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatch

from lkstream.errors import CorruptRecordError
from lkstream.format.batch import (
    ATTRIBUTES_AT,
    HEADER,
    HEADER_SIZE,
    check_batch,
    compute_crc,
    stamp_base_offset,
)
from lkstream.format.codec import Compression, decode_batch, decode_batches, encode_batch
from lkstream.storage.checkpoint import CHECKPOINT_NAME, Checkpoint
from lkstream.storage.clock import ManualClock
from lkstream.storage.files import MemoryFile
from lkstream.storage.index import ENTRY, OffsetIndex
from lkstream.storage.log import PartitionLog
from lkstream.storage.offsets import OffsetStore
from lkstream.storage.producers import SNAPSHOT_NAME, ProducerStateTable

TIMESTAMP_MS = 1_700_000_000_000
RECORDS = [(b"k1", b"v1"), (None, b"hello")]

# -- vector 1: the batch as a producer builds it (base offset 0) -------------------------------------
BATCH_HEX = (
    "0000000000000000"  # base_offset            0
    "00000048"  # batch_length           72 (total size 12 + 72 = 84)
    "ffffffff"  # partition_leader_epoch -1 (as aiokafka's builder writes it)
    "02"  # magic                  2
    "0e205d8c"  # crc                    CRC-32C of bytes [21, 84)
    "0000"  # attributes             no compression, create time
    "00000001"  # last_offset_delta      1
    "0000018bcfe56800"  # base_timestamp         1700000000000
    "0000018bcfe56800"  # max_timestamp          1700000000000
    "ffffffffffffffff"  # producer_id            -1
    "ffff"  # producer_epoch         -1
    "ffffffff"  # base_sequence          -1
    "00000002"  # records_count          2
    # record 0: length 10, attrs 0, ts delta 0, offset delta 0, key "k1", value "v1", 0 headers
    "14000000046b3104763100"
    # record 1: length 11, attrs 0, ts delta 0, offset delta 1, key null, value "hello", 0 headers
    "16000002010a68656c6c6f00"
)
BATCH_CRC = 0x0E205D8C
BATCH_SIZE = 84

# -- vector 2: the same batch after the broker stamped base offset 42 ------------------------------
STAMPED_42_HEX = "000000000000002a" + BATCH_HEX[16:]

# -- vector 3: index entries (offset 0 at position 0; offset 42 at position 4096) --------------------
INDEX_ENTRY_0_HEX = "0000000000000000" + "0000000000000000"  # offset, position
INDEX_ENTRY_42_HEX = "000000000000002a" + "0000000000001000"  # offset, position

# -- vector 4: checkpoint.meta of a partition holding exactly vector 1 --------------------------------
# producers.snapshot of a log with no idempotent producer, covering offsets below 2:
# magic "LKPS", version 2, offset 2, 0 producers, CRC-32C.
EMPTY_PRODUCERS_SNAPSHOT_HEX = "4c4b50530002000000000000000200000000f5c1bc32"
# The same in version 1 (before producers carried their last append time): still read.
EMPTY_PRODUCERS_SNAPSHOT_V1_HEX = "4c4b50530001000000000000000200000000a4b7f49d"
CHECKPOINT_HEX = (
    "4c4b4350"  # magic              b"LKCP"
    "0001"  # version            1
    "ffffffffffffffff"  # last_sealed_base   -1 (no sealed segment)
    "0000000000000000"  # active_base        0
    "0000000000000054"  # recovery_point     84
    "0000000000000002"  # next_offset        2
    "caed5e84"  # crc                CRC-32C of bytes [0, 38)
)
CHECKPOINT_CRC = 0xCAED5E84
# The checkpoint a freshly created, empty partition writes.
EMPTY_CHECKPOINT_HEX = "4c4b43500001ffffffffffffffff" + "00" * 24 + "51d04612"

# -- vector 5: a committed offset file -----------------------------------------------------------------
OFFSET_FILE_NAME = "strategy-v1__market.ticks__part0.offset"
OFFSET_FILE_BODY = b'{"offset": 2, "committed_ms": 1700000000000}\n'


def _golden() -> bytes:
    return bytes.fromhex(BATCH_HEX)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode one zigzag varint (Kafka/protobuf ``sint``) at ``pos``; return (value, next pos)."""
    shift = raw = 0
    while True:
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos


# -- the batch --------------------------------------------------------------------------------------


def test_encode_batch_produces_the_golden_bytes() -> None:
    built = encode_batch(RECORDS, timestamp_ms=TIMESTAMP_MS, compression=Compression.NONE)
    assert bytes(built).hex() == BATCH_HEX
    assert len(built) == BATCH_SIZE


def test_golden_batch_header_fields() -> None:
    batch = _golden()
    fields = HEADER.unpack_from(batch)
    # base, length, leader epoch, magic, crc, attributes, last delta, base ts, max ts, pid, pepoch, seq, count
    assert fields == (0, 72, -1, 2, BATCH_CRC, 0, 1, TIMESTAMP_MS, TIMESTAMP_MS, -1, -1, -1, 2)
    header = check_batch(batch)
    assert (header.size, header.next_offset, header.compression) == (BATCH_SIZE, 2, 0)


def test_golden_batch_crc_is_crc32c_from_attributes_to_end() -> None:
    batch = _golden()
    assert compute_crc(batch) == BATCH_CRC
    assert crc32c.crc32c(batch[ATTRIBUTES_AT:]) == BATCH_CRC
    assert ATTRIBUTES_AT == 21


def test_aiokafka_agrees_on_the_golden_crc() -> None:
    assert DefaultRecordBatch(_golden()).validate_crc()
    assert DefaultRecordBatch(bytes.fromhex(STAMPED_42_HEX)).validate_crc()


def test_golden_records_follow_the_v2_record_layout() -> None:
    batch = _golden()
    pos = HEADER_SIZE
    decoded = []
    for _ in range(2):
        length, pos = _varint(batch, pos)
        end = pos + length
        attributes = batch[pos]
        ts_delta, p = _varint(batch, pos + 1)
        offset_delta, p = _varint(batch, p)
        key_len, p = _varint(batch, p)
        key = None if key_len < 0 else batch[p : p + key_len]
        p += max(key_len, 0)
        value_len, p = _varint(batch, p)
        value = batch[p : p + value_len]
        p += value_len
        header_count, p = _varint(batch, p)
        assert p == end
        decoded.append((length, attributes, ts_delta, offset_delta, key, value, header_count))
        pos = end
    assert pos == BATCH_SIZE
    assert decoded == [(10, 0, 0, 0, b"k1", b"v1", 0), (11, 0, 0, 1, None, b"hello", 0)]


def test_decoding_the_golden_batch_gives_the_records() -> None:
    records = decode_batch(_golden(), "market.ticks", 3)
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records] == [
        (0, TIMESTAMP_MS, b"k1", b"v1", []),
        (1, TIMESTAMP_MS, None, b"hello", []),
    ]
    assert {(r.topic, r.partition, r.timestamp_type) for r in records} == {("market.ticks", 3, 0)}


# -- stamping ---------------------------------------------------------------------------------------


def test_stamping_base_offset_42_changes_only_the_first_eight_bytes() -> None:
    batch = bytearray(_golden())
    stamp_base_offset(batch, 42)
    assert bytes(batch).hex() == STAMPED_42_HEX
    assert batch[8:] == _golden()[8:]


def test_stamped_batch_keeps_its_crc_and_decodes_at_42() -> None:
    stamped = bytes.fromhex(STAMPED_42_HEX)
    header = check_batch(stamped)
    assert header.crc == compute_crc(stamped) == BATCH_CRC
    assert (header.base_offset, header.last_offset) == (42, 43)
    records = decode_batches(stamped, "t", 0)
    assert [(r.offset, r.key, r.value) for r in records] == [(42, b"k1", b"v1"), (43, None, b"hello")]


def test_a_flipped_byte_under_the_crc_is_rejected_by_both_codecs() -> None:
    damaged = bytearray(_golden())
    damaged[-2] ^= 0x01  # inside the value "hello"
    assert not DefaultRecordBatch(bytes(damaged)).validate_crc()
    with pytest.raises(CorruptRecordError, match="CRC-32C mismatch"):
        check_batch(damaged)


# -- index ------------------------------------------------------------------------------------------


def test_index_entries_are_sixteen_bytes_big_endian() -> None:
    assert ENTRY.pack(0, 0).hex() == INDEX_ENTRY_0_HEX
    assert ENTRY.pack(42, 4096).hex() == INDEX_ENTRY_42_HEX
    assert ENTRY.size == 16


def test_an_index_file_of_the_golden_entries_loads() -> None:
    index = OffsetIndex(MemoryFile(data=bytes.fromhex(INDEX_ENTRY_0_HEX + INDEX_ENTRY_42_HEX)), 4096)
    index.load()
    assert index.entries() == [(0, 0), (42, 4096)]
    assert index.lookup(41) == (0, 0)
    assert index.lookup(42) == (42, 4096)


# -- checkpoint -------------------------------------------------------------------------------------


def test_checkpoint_encodes_to_the_golden_bytes() -> None:
    encoded = Checkpoint(last_sealed_base=-1, active_base=0, recovery_point=BATCH_SIZE, next_offset=2).encode()
    assert encoded.hex() == CHECKPOINT_HEX
    assert len(encoded) == 42
    assert crc32c.crc32c(encoded[:38]) == CHECKPOINT_CRC == int(CHECKPOINT_HEX[-8:], 16)


def test_golden_checkpoint_decodes() -> None:
    assert Checkpoint.decode(bytes.fromhex(CHECKPOINT_HEX)) == Checkpoint(-1, 0, BATCH_SIZE, 2)
    assert Checkpoint.decode(bytes.fromhex(EMPTY_CHECKPOINT_HEX)) == Checkpoint(-1, 0, 0, 0)


# -- offset file ------------------------------------------------------------------------------------


def test_offset_file_name_and_body(tmp_path: Path) -> None:
    store = OffsetStore(str(tmp_path), clock=ManualClock(TIMESTAMP_MS))
    store.commit("strategy-v1", "market.ticks", 0, 2)
    store.close()  # the per-group file is written when the offsets journal is compacted
    path = store.path_for("strategy-v1", "market.ticks", 0)
    assert path == os.path.join(str(tmp_path), "offsets", OFFSET_FILE_NAME)
    assert Path(path).read_bytes() == OFFSET_FILE_BODY
    assert OffsetStore(str(tmp_path)).read_committed("strategy-v1", "market.ticks", 0) == 2


# -- the whole partition directory, written by the real log ------------------------------------------


def test_partition_log_writes_exactly_the_golden_files(tmp_path: Path) -> None:
    directory = tmp_path / "topics" / "market.ticks" / "part0"
    log = PartitionLog(str(directory), "market.ticks", 0)
    try:
        assert not (directory / CHECKPOINT_NAME).exists()  # a new, empty log has nothing to protect
        result = log.append(bytearray(encode_batch(RECORDS, timestamp_ms=TIMESTAMP_MS)))
        assert (result.base_offset, result.last_offset, result.size) == (0, 1, BATCH_SIZE)
    finally:
        log.close()
    assert sorted(os.listdir(directory)) == [
        "00000000000000000000.idx",
        "00000000000000000000.seg",
        CHECKPOINT_NAME,
        SNAPSHOT_NAME,  # idempotent-producer state (empty here: the batch has no producer id)
    ]
    assert (directory / "00000000000000000000.seg").read_bytes().hex() == BATCH_HEX
    assert (directory / "00000000000000000000.idx").read_bytes().hex() == INDEX_ENTRY_0_HEX
    assert (directory / CHECKPOINT_NAME).read_bytes().hex() == CHECKPOINT_HEX
    assert (directory / SNAPSHOT_NAME).read_bytes().hex() == EMPTY_PRODUCERS_SNAPSHOT_HEX
    for snapshot in (EMPTY_PRODUCERS_SNAPSHOT_HEX, EMPTY_PRODUCERS_SNAPSHOT_V1_HEX):
        assert ProducerStateTable().load_snapshot(bytes.fromhex(snapshot)) == 2


def test_partition_log_stamps_the_next_offset_into_a_second_batch(tmp_path: Path) -> None:
    directory = tmp_path / "part0"
    log = PartitionLog(str(directory), "t", 0)
    try:
        log.append(bytearray(_golden()))
        second = bytearray(_golden())
        assert log.append(second).base_offset == 2
        assert bytes(second).hex() == "0000000000000002" + BATCH_HEX[16:]
        assert check_batch(second).crc == BATCH_CRC
    finally:
        log.close()


def test_a_log_that_only_served_reads_closes_without_writing(tmp_path: Path) -> None:
    """Idle partitions close fast: no fsync and no checkpoint when nothing was appended since open."""
    directory = tmp_path / "part0"
    PartitionLog(str(directory), "t", 0).close()
    assert not (directory / CHECKPOINT_NAME).exists()  # new and empty: nothing to protect
    log = PartitionLog(str(directory), "t", 0)
    log.append(bytearray(_golden()))
    log.close()
    written = (directory / CHECKPOINT_NAME).stat().st_mtime_ns
    reopened = PartitionLog(str(directory), "t", 0)
    assert reopened.read(0, 1 << 20).data.hex() == BATCH_HEX
    reopened.close()
    assert (directory / CHECKPOINT_NAME).stat().st_mtime_ns == written
    assert (directory / CHECKPOINT_NAME).read_bytes().hex() == CHECKPOINT_HEX
