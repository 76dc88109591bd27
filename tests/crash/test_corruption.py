"""Corruption tests on real files: each kind of damage is detected, reported and handled.

A log of one partition is written with small segments (several sealed, one
active), the broker is closed, a file is damaged by hand, and the directory is
reopened. What must happen (ARCHITECTURE.md "On disk", issue 2 "Recovery"):

* a damaged batch in a **sealed** segment is never served: reading it raises
  ``CorruptRecordError`` naming the file and the byte position; other
  segments stay readable;
* a zero-filled or torn tail of the **active** segment is cut on open; the cut
  byte range is reported in ``Broker.recoveries`` / ``PartitionLog.recovery``
  and logged as a warning naming topic, partition and range;
* a truncated, deleted or garbage **index** is rebuilt by scanning, and reads
  stay correct;
* a garbage, truncated or stale **checkpoint.meta** is reported in
  ``recovery.checkpoint_problem`` and the whole active segment is validated;
  no data is lost;
* stray ``*.tmp`` files and orphan ``.idx`` files are swept on open.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lkstream import Broker, CorruptRecordError
from lkstream.format.batch import ATTRIBUTES_AT, BASE_OFFSET_AT, BATCH_LENGTH_AT, CRC_AT, HEADER_SIZE, check_batch
from lkstream.format.codec import decode_batches
from lkstream.storage import segment as segment_mod
from lkstream.storage.checkpoint import CHECKPOINT_NAME, Checkpoint, read_checkpoint
from lkstream.storage.log import PartitionLog

from ._support import Seed

TOPIC = "corrupt"
SEGMENT_BYTES = 4096


@dataclass
class Written:
    """A closed data directory and what it holds."""

    data_dir: str
    part_dir: Path
    records: dict[int, tuple[bytes, bytes]]
    next_offset: int

    def segments(self) -> list[Path]:
        return sorted(self.part_dir.glob("*.seg"))

    def index(self, segment: Path) -> Path:
        return segment.with_suffix(".idx")


def open_broker(written: Written) -> Broker:
    return Broker(
        persist_dir=written.data_dir,
        fsync_mode="sync",
        partitions=1,
        segment_max_bytes=SEGMENT_BYTES,
        index_interval_bytes=256,
    )


def batches_of(path: Path) -> list[tuple[int, int, int]]:
    """``(position, size, base_offset)`` of each batch in a segment file."""
    data, pos, out = path.read_bytes(), 0, []
    while pos < len(data):
        header = check_batch(data, pos)
        out.append((pos, header.size, header.base_offset))
        pos += header.size
    return out


@pytest.fixture
def written(tmp_path: Path, crash_seed: Seed) -> Written:
    rng = crash_seed.rng()
    data_dir = str(tmp_path / "data")
    records: dict[int, tuple[bytes, bytes]] = {}
    written = Written(data_dir, Path(data_dir, "topics", TOPIC, "part0"), records, 0)
    with open_broker(written) as broker:
        n = 0
        # Several sealed segments, and an active one with several index entries.
        while len(written.segments()) < 4 or written.segments()[-1].stat().st_size < 1500:
            pairs = [
                (f"k{i}".encode(), f"{i}:".encode() + rng.randbytes(rng.randint(10, 200)))
                for i in range(n, n + rng.randint(1, 6))
            ]
            for (_, offset), pair in zip(broker.produce_many_sync(TOPIC, pairs), pairs, strict=True):
                records[offset] = pair
            n += len(pairs)
    written.next_offset = n
    assert len(written.segments()) >= 4
    return written


def read_all(broker: Broker, start: int = 0, end: int | None = None) -> Iterator[tuple[int, bytes, bytes]]:
    part = broker.partition(TOPIC, 0)
    offset, end = start, part.high_watermark if end is None else end
    while offset < end:
        records = part.read_from(offset, max_bytes=2048)
        assert records, f"nothing read at {offset}"
        for record in records:
            if record.offset >= end:
                return
            yield record.offset, record.key, record.value
        offset = records[-1].offset + 1


def assert_intact(broker: Broker, written: Written, seed: Seed) -> None:
    got = {offset: (key, value) for offset, key, value in read_all(broker)}
    assert got == written.records, f"data differs after recovery {seed}"
    assert broker.partition(TOPIC, 0).stats().next_offset == written.next_offset, seed


def recovery_of(broker: Broker) -> object:
    [recovery] = broker.recoveries
    return recovery


# -- sealed segments ----------------------------------------------------------------------------


@pytest.mark.parametrize("region", ["records", "crc-covered-header", "crc-field", "batch-length", "base-offset"])
def test_flipped_bit_in_sealed_segment_is_never_served(region: str, written: Written, crash_seed: Seed) -> None:
    rng = crash_seed.rng()
    sealed = written.segments()[1]
    batches = batches_of(sealed)
    position, size, base = batches[rng.randrange(len(batches))]
    if region == "records":
        byte = rng.randrange(HEADER_SIZE, size)
    elif region == "crc-covered-header":
        byte = rng.randrange(ATTRIBUTES_AT, HEADER_SIZE)
    elif region == "crc-field":
        byte = rng.randrange(CRC_AT, ATTRIBUTES_AT)
    elif region == "batch-length":
        byte = rng.randrange(BATCH_LENGTH_AT, BATCH_LENGTH_AT + 4)
    else:
        byte = rng.randrange(BASE_OFFSET_AT, BASE_OFFSET_AT + 8)
    bit = rng.randrange(8)
    data = bytearray(sealed.read_bytes())
    data[position + byte] ^= 1 << bit
    sealed.write_bytes(data)
    where = f"(batch at {position}, base {base}, byte {byte}, bit {bit}) {crash_seed}"

    with open_broker(written) as broker:
        part = broker.partition(TOPIC, 0)
        with pytest.raises(CorruptRecordError) as caught:
            # Read every offset of the damaged segment one by one: none may come back wrong.
            seg_end = int(written.segments()[2].stem)
            for offset in range(int(sealed.stem), seg_end):
                for record in part.read_from(offset, max_msgs=1, max_bytes=1):
                    assert (record.key, record.value) == written.records[record.offset], (
                        f"offset {record.offset} served wrong bytes {where}"
                    )
                    assert record.offset == offset, f"read at {offset} returned offset {record.offset} {where}"
        error = caught.value
        assert error.path == str(sealed), where
        assert error.position is not None, where
        if region != "batch-length":
            assert error.position == position, f"error at {error.position} {where}"
        assert str(sealed) in str(error) and f"byte {error.position}" in str(error), where
        # The other segments are still served, whole and correct.
        for other in [s for s in written.segments() if s != sealed]:
            start = int(other.stem)
            nxt = [int(s.stem) for s in written.segments() if int(s.stem) > start]
            end = nxt[0] if nxt else written.next_offset
            for offset, key, value in read_all(broker, start, end):
                assert (key, value) == written.records[offset], where


def test_every_bit_outside_the_crc_is_caught_on_read(written: Written, crash_seed: Seed) -> None:
    """``base_offset`` and ``batch_length`` are not covered by the CRC (the broker stamps the
    offset): each of their 96 bits, flipped, must give CorruptRecordError or correct data on
    every read of the segment, never wrong records and never a hang."""
    sealed = written.segments()[1]
    seg_start, seg_end = int(sealed.stem), int(written.segments()[2].stem)
    batches = batches_of(sealed)
    position, _, base = batches[crash_seed.rng().randrange(len(batches))]
    original = sealed.read_bytes()
    for byte in range(BASE_OFFSET_AT, BATCH_LENGTH_AT + 4):
        for bit in range(8):
            data = bytearray(original)
            data[position + byte] ^= 1 << bit
            sealed.write_bytes(data)
            where = f"(batch at {position}, base {base}, byte {byte}, bit {bit}) {crash_seed}"
            log = PartitionLog(str(written.part_dir), TOPIC, 0)
            try:
                caught = 0
                for offset in range(seg_start, seg_end):
                    try:
                        result = log.read(offset, 1)
                    except CorruptRecordError as exc:
                        assert exc.path == str(sealed) and exc.position is not None, where
                        caught += 1
                        continue
                    for record in decode_batches(result.data, TOPIC, 0, offset)[:1]:
                        assert record.offset == offset, f"read at {offset} gave offset {record.offset} {where}"
                        assert (record.key, record.value) == written.records[offset], f"wrong bytes {where}"
                assert caught, f"the damaged batch was served as if intact {where}"
            finally:
                log.close()
    sealed.write_bytes(original)


# -- the active segment's tail ----------------------------------------------------------------


def _assert_tail_cut(
    broker: Broker, active: Path, *, valid: int, cut: int, caplog: pytest.LogCaptureFixture, seed: Seed
) -> None:
    recovery = recovery_of(broker)
    log = broker.partition(TOPIC, 0).log
    assert recovery is log.recovery, seed
    assert recovery.segment == str(active), seed
    assert (recovery.report.valid_bytes, recovery.report.truncated_bytes) == (valid, cut), f"{recovery} {seed}"
    assert recovery.report.reason, seed
    assert active.stat().st_size == valid, seed
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("recovery truncated" in m and f"{TOPIC}[0]" in m and f"{valid}..{valid + cut}" in m for m in warnings), (
        f"no warning naming {TOPIC}[0] and bytes {valid}..{valid + cut}: {warnings} {seed}"
    )


def test_zero_filled_tail_of_active_segment_is_cut_and_reported(
    written: Written, crash_seed: Seed, caplog: pytest.LogCaptureFixture
) -> None:
    active = written.segments()[-1]
    valid = active.stat().st_size
    zeros = crash_seed.rng().choice([1, 12, 61, 4096, 10000])
    with open(active, "ab") as f:
        f.write(bytes(zeros))
    caplog.set_level(logging.WARNING, logger="lkstream")
    with open_broker(written) as broker:
        _assert_tail_cut(broker, active, valid=valid, cut=zeros, caplog=caplog, seed=crash_seed)
        assert_intact(broker, written, crash_seed)
        # Appends continue right after the last record.
        assert broker.produce_many_sync(TOPIC, [(b"k", b"after")]) == [(0, written.next_offset)], crash_seed


def test_torn_half_batch_at_end_of_active_segment_is_cut_and_reported(
    written: Written, crash_seed: Seed, caplog: pytest.LogCaptureFixture
) -> None:
    active = written.segments()[-1]
    data = active.read_bytes()
    position, size, base = batches_of(active)[-1]
    # The last batch was torn: only a part of it reached the disk.
    keep = crash_seed.rng().randint(1, size - 1)
    active.write_bytes(data[: position + keep])
    for offset in range(base, written.next_offset):
        del written.records[offset]
    written.next_offset = base
    caplog.set_level(logging.WARNING, logger="lkstream")
    with open_broker(written) as broker:
        _assert_tail_cut(broker, active, valid=position, cut=keep, caplog=caplog, seed=crash_seed)
        assert_intact(broker, written, crash_seed)
        assert broker.produce_many_sync(TOPIC, [(b"k", b"after")]) == [(0, base)], crash_seed


def test_torn_batch_appended_after_the_recovery_point_is_cut(
    written: Written, crash_seed: Seed, caplog: pytest.LogCaptureFixture
) -> None:
    """A half-written batch past the checkpoint (the common crash shape): validated from the
    recovery point, cut, reported; nothing before it is touched."""
    active = written.segments()[-1]
    data = active.read_bytes()
    position, size, _ = batches_of(active)[-1]
    half = data[position : position + size // 2]
    with open(active, "ab") as f:
        f.write(half)
    caplog.set_level(logging.WARNING, logger="lkstream")
    with open_broker(written) as broker:
        _assert_tail_cut(broker, active, valid=len(data), cut=len(half), caplog=caplog, seed=crash_seed)
        assert recovery_of(broker).checkpoint_problem == "", crash_seed
        assert_intact(broker, written, crash_seed)


# -- indexes ----------------------------------------------------------------------------------


def _damage_index(path: Path, how: str, seed: Seed) -> None:
    rng = seed.rng()
    raw = path.read_bytes()
    assert len(raw) >= 32, f"test needs an index with several entries, got {len(raw)} bytes {seed}"
    if how == "truncated-mid-entry":
        path.write_bytes(raw[: rng.randrange(1, len(raw) // 16) * 16 + rng.randint(1, 15)])
    elif how == "truncated-whole-entries":
        path.write_bytes(raw[: rng.randrange(1, len(raw) // 16) * 16])
    elif how == "deleted":
        path.unlink()
    elif how == "emptied":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(rng.randbytes(len(raw)))
    elif how == "plausible-garbage":
        # Monotonic, in range, but every position shifted: passes the cheap checks of load().
        entries = [
            (int.from_bytes(raw[i : i + 8], "big"), int.from_bytes(raw[i + 8 : i + 16], "big"))
            for i in range(0, len(raw), 16)
        ]
        shifted = [entries[0]] + [(o, p + 1) for o, p in entries[1:]]
        path.write_bytes(b"".join(o.to_bytes(8, "big") + p.to_bytes(8, "big") for o, p in shifted))
    else:
        raise ValueError(how)


INDEX_DAMAGE = ["truncated-mid-entry", "truncated-whole-entries", "deleted", "emptied", "garbage", "plausible-garbage"]


@pytest.mark.parametrize("how", INDEX_DAMAGE)
def test_damaged_index_of_sealed_segment_is_rebuilt(how: str, written: Written, crash_seed: Seed) -> None:
    sealed = written.segments()[1]
    _damage_index(written.index(sealed), how, crash_seed)
    with open_broker(written) as broker:
        assert_intact(broker, written, crash_seed)
        segment = broker.partition(TOPIC, 0).log._segments[1]
        if how not in ("truncated-whole-entries",):
            assert segment.index_rebuilt, f"index was not rebuilt after {how} {crash_seed}"
        # A rebuilt index matches what a fresh scan gives: an entry for the first batch at least.
        assert segment.index.lookup(segment.base_offset) == (segment.base_offset, 0), crash_seed
    if how != "truncated-whole-entries":
        rebuilt = written.index(sealed).read_bytes()
        assert rebuilt and len(rebuilt) % 16 == 0, f"rebuilt index not written back {crash_seed}"


@pytest.mark.parametrize("how", INDEX_DAMAGE)
def test_damaged_index_of_active_segment_is_rebuilt_on_open(how: str, written: Written, crash_seed: Seed) -> None:
    active = written.segments()[-1]
    if len(written.index(active).read_bytes()) < 32:
        # The seeded log decides how much lands in the active segment; with fewer than two
        # index entries there is no index damage to rebuild, so the case does not apply.
        pytest.skip(f"active segment too small for several index entries {crash_seed}")
    _damage_index(written.index(active), how, crash_seed)
    with open_broker(written) as broker:
        recovery = recovery_of(broker)
        if how != "truncated-whole-entries":
            assert recovery.report.index_rebuilt, f"{recovery} {crash_seed}"
        assert recovery.report.truncated_bytes == 0, f"{recovery} {crash_seed}"
        assert_intact(broker, written, crash_seed)


# -- checkpoint.meta --------------------------------------------------------------------------


@pytest.fixture
def validated_from(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Records where each segment validation starts: (segment path, position)."""
    calls: list[tuple[str, int]] = []
    original = segment_mod.Segment._validate_from

    def spy(self: segment_mod.Segment, position: int, expected_offset: int) -> tuple[int, int, str]:
        calls.append((self.path, position))
        return original(self, position, expected_offset)

    monkeypatch.setattr(segment_mod.Segment, "_validate_from", spy)
    return calls


@pytest.mark.parametrize("how", ["garbage", "truncated", "empty", "stale-segment", "stale-beyond-end", "wrong-magic"])
def test_bad_checkpoint_is_reported_and_active_segment_fully_validated(
    how: str,
    written: Written,
    crash_seed: Seed,
    validated_from: list[tuple[str, int]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = written.part_dir / CHECKPOINT_NAME
    raw = path.read_bytes()
    good = read_checkpoint(str(written.part_dir))
    assert good is not None and good.recovery_point > 0, crash_seed
    rng = crash_seed.rng()
    active = written.segments()[-1]
    if how == "garbage":
        path.write_bytes(rng.randbytes(len(raw)))
    elif how == "truncated":
        path.write_bytes(raw[: rng.randrange(1, len(raw))])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "wrong-magic":
        path.write_bytes(b"XXXX" + raw[4:])
    elif how == "stale-segment":
        # A checkpoint from when an older segment was active (e.g. restored from a backup).
        sealed = written.segments()[-2]
        path.write_bytes(Checkpoint(-1, int(sealed.stem), sealed.stat().st_size, int(active.stem)).encode())
    else:
        path.write_bytes(
            Checkpoint(
                good.last_sealed_base, good.active_base, active.stat().st_size + 999, written.next_offset + 5
            ).encode()
        )
    caplog.set_level(logging.WARNING, logger="lkstream")
    with open_broker(written) as broker:
        recovery = recovery_of(broker)
        assert recovery.checkpoint_problem, f"{how} checkpoint not reported: {recovery} {crash_seed}"
        assert "checkpoint" in recovery.checkpoint_problem, crash_seed
        assert any(recovery.checkpoint_problem in r.getMessage() for r in caplog.records), crash_seed
        assert (str(active), 0) in validated_from, f"active segment not validated from 0: {validated_from} {crash_seed}"
        assert recovery.report.valid_bytes == active.stat().st_size, crash_seed
        assert recovery.report.truncated_bytes == 0, crash_seed
        assert_intact(broker, written, crash_seed)
    # Opening wrote a fresh, valid checkpoint: the next open trusts it again.
    fresh = read_checkpoint(str(written.part_dir))
    assert fresh is not None and fresh.active_base == int(active.stem), crash_seed
    assert fresh.recovery_point == active.stat().st_size and fresh.next_offset == written.next_offset, crash_seed


def test_missing_checkpoint_validates_the_whole_active_segment(
    written: Written, crash_seed: Seed, validated_from: list[tuple[str, int]]
) -> None:
    (written.part_dir / CHECKPOINT_NAME).unlink()
    with open_broker(written) as broker:
        assert (str(written.segments()[-1]), 0) in validated_from, crash_seed
        assert_intact(broker, written, crash_seed)


def test_checkpoint_inconsistent_with_the_segment_loses_no_data(
    written: Written, crash_seed: Seed, validated_from: list[tuple[str, int]]
) -> None:
    """A checkpoint with a valid CRC whose recovery point names the wrong next offset
    (e.g. restored from another copy of the data): it must not make recovery cut valid batches."""
    active = written.segments()[-1]
    batches = batches_of(active)
    position, _, base = batches[len(batches) // 2]
    good = read_checkpoint(str(written.part_dir))
    assert good is not None
    path = written.part_dir / CHECKPOINT_NAME
    path.write_bytes(Checkpoint(good.last_sealed_base, good.active_base, position, base + 1).encode())
    with open_broker(written) as broker:
        recovery = recovery_of(broker)
        assert "does not match" in recovery.checkpoint_problem, f"{recovery} {crash_seed}"
        assert (str(active), 0) in validated_from, crash_seed
        assert recovery.report.truncated_bytes == 0, f"{recovery} {crash_seed}"
        assert_intact(broker, written, crash_seed)


# -- strays -----------------------------------------------------------------------------------


def test_stray_tmp_files_and_orphan_indexes_are_swept(written: Written, crash_seed: Seed) -> None:
    strays = {
        CHECKPOINT_NAME + ".tmp": os.urandom(20),
        "00000000000000999999.idx": os.urandom(32),  # its segment is gone (a crash mid-delete)
        "whatever.tmp": b"",
    }
    for name, content in strays.items():
        (written.part_dir / name).write_bytes(content)
    topic_tmp = written.part_dir.parent / "topic.json.tmp"
    topic_tmp.write_bytes(b"{")
    with open_broker(written) as broker:
        recovery = recovery_of(broker)
        assert sorted(recovery.swept_files) == sorted(strays), f"{recovery.swept_files} {crash_seed}"
        assert_intact(broker, written, crash_seed)
    left = sorted(p.name for p in written.part_dir.iterdir())
    for name in strays:
        assert name not in left, f"{name} not swept {crash_seed}"
    assert len([n for n in left if n.endswith(".idx")]) == len(written.segments()), left
