"""lkstream.storage.verify: verify_data_dir tells corruption (errors) from states the broker repairs (warnings)."""

from __future__ import annotations

import json
import os

import pytest

from lkstream import Broker, CorruptRecordError
from lkstream.storage.offsets import parse_offset_file_name
from lkstream.storage.reader import DataDirReader
from lkstream.storage.verify import verify_data_dir

from .datadir import batch_positions, build, flip_byte, part_dir, segment_paths


def snapshot(root: str) -> dict[str, tuple[bytes, int]]:
    out = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                out[path] = (f.read(), os.stat(path).st_mtime_ns)
    return out


# -- verify_data_dir ---------------------------------------------------------------------------------


def test_verify_finds_nothing_in_a_clean_data_dir(data_dir: str) -> None:
    build(data_dir, batches=12, partitions=2)
    with Broker(persist_dir=data_dir) as broker:
        broker.offset_store.commit("g", "t", 0, 5)
    report = verify_data_dir(data_dir)
    assert report.problems == []
    assert report.offset_files == 1
    assert [(p.partition, p.end_offset) for p in report.partitions] == [(0, 36), (1, 0)]


def test_verify_reports_a_flipped_byte_in_a_sealed_segment_as_an_error(data_dir: str) -> None:
    build(data_dir, batches=12)
    sealed = segment_paths(data_dir)[1]
    position = batch_positions(sealed)[2]
    flip_byte(sealed, position + 70)
    report = verify_data_dir(data_dir)
    assert [(p.severity, p.path, p.position) for p in report.problems] == [("error", sealed, position)]
    assert "CRC-32C mismatch" in report.problems[0].message


def test_verify_calls_a_torn_tail_a_warning(data_dir: str) -> None:
    build(data_dir, batches=6)
    active = segment_paths(data_dir)[-1]
    size = os.path.getsize(active)
    with open(active, "ab") as f:
        f.write(b"\0" * 100)
    report = verify_data_dir(data_dir)
    assert [(p.severity, p.path, p.position) for p in report.problems] == [("warning", active, size)]
    assert "torn tail" in report.problems[0].message and report.errors == 0


def test_verify_calls_bad_bytes_followed_by_valid_batches_an_error(data_dir: str) -> None:
    build(data_dir, batches=7)
    active = segment_paths(data_dir)[-1]
    os.remove(os.path.join(part_dir(data_dir), "checkpoint.meta"))
    positions = batch_positions(active)
    assert len(positions) >= 2
    flip_byte(active, positions[0] + 100)
    problems = verify_data_dir(data_dir).problems
    errors = [p for p in problems if p.severity == "error"]
    assert [(p.path, p.position) for p in errors] == [(active, positions[0])]
    assert "discarding" in errors[0].message


def test_verify_calls_bad_fsynced_bytes_an_error_even_when_recovery_would_truncate_them(data_dir: str) -> None:
    build(data_dir, batches=6)
    active = segment_paths(data_dir)[-1]
    last = batch_positions(active)[-1]
    flip_byte(active, last + 100)
    # A damaged index makes recovery validate the whole segment (and truncate at the flip), but
    # checkpoint.meta still records these bytes as fsynced: losing them is corruption, not a torn tail.
    with open(active[:-4] + ".idx", "ab") as f:
        f.write(b"\0" * 5)
    errors = [p for p in verify_data_dir(data_dir).problems if p.severity == "error"]
    assert [(p.path, p.position) for p in errors] == [(active, last)]
    assert "recorded as fsynced" in errors[0].message


def test_verify_catches_a_flipped_base_offset_that_the_crc_does_not_cover(data_dir: str) -> None:
    build(data_dir, batches=12)
    sealed = segment_paths(data_dir)[0]
    position = batch_positions(sealed)[1]
    with open(sealed, "r+b") as f:
        f.seek(position)
        f.write((1000).to_bytes(8, "big"))
    errors = verify_data_dir(data_dir).problems
    assert (errors[0].severity, errors[0].path, errors[0].position) == ("error", sealed, position)
    assert "does not continue at offset 3" in errors[0].message
    with pytest.raises(CorruptRecordError, match="does not continue"):
        list(DataDirReader(data_dir).partition("t", 0).batches())


def test_verify_checks_index_entries_against_batch_starts(data_dir: str) -> None:
    build(data_dir, batches=12)
    index = segment_paths(data_dir)[0][:-4] + ".idx"
    with open(index, "r+b") as f:
        f.seek(16 + 8)  # entry 1's position
        f.write((5).to_bytes(8, "big"))
    problems = verify_data_dir(data_dir).problems
    assert [(p.severity, p.path, p.position) for p in problems] == [("error", index, 16)]


def test_verify_reports_a_sealed_index_of_a_bad_size(data_dir: str) -> None:
    build(data_dir, batches=12)
    index = segment_paths(data_dir)[0][:-4] + ".idx"
    with open(index, "ab") as f:
        f.write(b"\x01\x02\x03")
    problems = verify_data_dir(data_dir).problems
    assert [(p.severity, p.path) for p in problems] == [("error", index)]
    assert "multiple of 16" in problems[0].message


def test_verify_reports_a_garbage_checkpoint_and_stray_files(data_dir: str) -> None:
    build(data_dir, batches=2)
    directory = part_dir(data_dir)
    with open(os.path.join(directory, "checkpoint.meta"), "wb") as f:
        f.write(b"garbage")
    open(os.path.join(directory, "checkpoint.meta.tmp"), "wb").close()
    problems = {(p.severity, os.path.basename(p.path)) for p in verify_data_dir(data_dir).problems}
    assert problems == {("error", "checkpoint.meta"), ("warning", "checkpoint.meta.tmp")}


def test_verify_reports_unreadable_and_out_of_range_offset_files(data_dir: str) -> None:
    build(data_dir, batches=2)
    offsets = os.path.join(data_dir, "offsets")
    with open(os.path.join(offsets, "g1__t__part0.offset"), "wb") as f:
        f.write(b"{not json")
    with open(os.path.join(offsets, "g2__t__part0.offset"), "w") as f:
        json.dump({"offset": 1000, "committed_ms": 0}, f)
    report = verify_data_dir(data_dir)
    found = {(p.severity, os.path.basename(p.path)) for p in report.problems}
    assert found == {("error", "g1__t__part0.offset"), ("warning", "g2__t__part0.offset")}
    assert report.offset_files == 2


def test_verify_never_writes_and_never_takes_the_lock(data_dir: str) -> None:
    build(data_dir, batches=12)
    with Broker(persist_dir=data_dir) as broker:  # a live owner: verification must not need the lock
        before = snapshot(data_dir)
        report = verify_data_dir(data_dir)
        if os.path.exists("/proc/locks"):
            assert report.lock_holder == os.getpid()
        assert snapshot(data_dir) == before
        broker.produce_many_sync("t", [(None, b"after")])  # the broker is unaffected


# -- offset file names -------------------------------------------------------------------------------


def test_parse_offset_file_name_splits_group_topic_and_partition() -> None:
    assert parse_offset_file_name("g__orders__part3.offset") == ("g", "orders", 3)
    assert parse_offset_file_name("g__a__b__part0.offset") == ("g", "a__b", 0)
    assert parse_offset_file_name("g__orders__part03.offset") is None
    assert parse_offset_file_name("orders.offset") is None


def test_verify_reports_topic_configs_the_broker_cannot_honour(data_dir: str) -> None:
    with Broker(persist_dir=data_dir) as broker:
        broker.create_topic("t", configs={"cleanup.policy": "compact"})
    meta = os.path.join(data_dir, "topics", "t", "topic.json")
    with open(meta, encoding="utf-8") as f:
        raw = json.load(f)
    raw["configs"]["cleanup.policy"] = "shred"
    with open(meta, "w", encoding="utf-8") as f:
        json.dump(raw, f)
    report = verify_data_dir(data_dir)
    assert [(p.severity, p.path) for p in report.problems] == [("error", meta)]
    assert "'shred' is not delete or compact" in report.problems[0].message
