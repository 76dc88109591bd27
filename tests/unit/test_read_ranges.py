"""lkstream.storage.ranges: stored batches handed out as (file, position, length) for sendfile (issue 25).

What a range may carry is the point of these tests: whole batches, below the high watermark, only
bytes CRC-checked in this process, and always the bytes of the file it was computed on, whatever
happens to that file (retention, the file budget, a cleaner's rewrite) while the range is out.
Real files and a real socket pair; the bytes that arrive are compared with what was appended.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from lkstream.errors import CorruptRecordError
from lkstream.format.codec import decode_batches
from lkstream.storage.files import MemoryFile
from lkstream.storage.handles import FileBudget
from lkstream.storage.log import LogConfig, PartitionLog
from lkstream.storage.ranges import MAX_SPANS, FileRange, VerifiedSpans

from .support import make_batch


class Logs:
    """PartitionLogs on one directory, each closed at teardown."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.opened: list[PartitionLog] = []

    def open(self, budget: FileBudget | None = None, **config: object) -> PartitionLog:
        factory = {"file_factory": budget.file} if budget is not None else {}
        plog = PartitionLog(str(self.directory), "t", 0, LogConfig(**config), **factory)  # type: ignore[arg-type]
        self.opened.append(plog)
        return plog


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[Logs]:
    opened = Logs(tmp_path / "part0")
    yield opened
    for plog in opened.opened:
        plog.close()


def _append(plog: PartitionLog, batches: int, records: int = 20, value_size: int = 100) -> list[bytes]:
    """Append ``batches`` batches; the stamped bytes of each, as stored."""
    stored = []
    for _ in range(batches):
        batch = make_batch(records, value_size=value_size)
        plog.append(batch)
        stored.append(bytes(batch))
    return stored


def _sent_through_a_socket(found: FileRange) -> bytes:
    """What ``sendfile(2)`` of the range puts on a socket (the Kafka listener's zero-copy path)."""
    left, right = socket.socketpair()
    try:
        sent = 0
        while sent < found.length:
            sent += os.sendfile(left.fileno(), found.fd, found.position + sent, found.length - sent)
        left.shutdown(socket.SHUT_WR)
        received = bytearray()
        while chunk := right.recv(1 << 20):
            received += chunk
        return bytes(received)
    finally:
        left.close()
        right.close()


def test_appended_batches_come_back_as_a_range_of_whole_batches_within_max_bytes(logs: Logs) -> None:
    plog = logs.open()
    stored = _append(plog, 10)
    size = len(stored[0])
    found = plog.read_for_send(0, 3 * size + size // 2)
    assert isinstance(found.data, FileRange)
    try:
        assert found.data.length == 3 * size  # whole batches only, at most max_bytes
        assert _sent_through_a_socket(found.data) == b"".join(stored[:3])
        assert found.data.read() == plog.read(0, 3 * size + size // 2).data
        assert (found.log_start_offset, found.high_watermark) == (0, 200)
    finally:
        found.data.release()


def test_the_first_batch_comes_whole_only_when_it_may_exceed_max_bytes(logs: Logs) -> None:
    plog = logs.open()
    stored = _append(plog, 2)
    whole = plog.read_for_send(25, 10)  # offset 25 lies in the second batch
    assert isinstance(whole.data, FileRange)
    assert _sent_through_a_socket(whole.data) == stored[1]
    whole.data.release()
    assert plog.read_for_send(25, 10, min_one=False).data == b""
    assert plog.read_for_send(25, 10, min_one=False, zero_copy=False).data == b""


def test_a_range_never_reaches_past_the_high_watermark(logs: Logs) -> None:
    """sync mode: the high watermark is the fsynced end; appended bytes after it are not handed out."""
    plog = logs.open(visible_after_fsync=True)
    stored = _append(plog, 3)
    plog.flush()
    _append(plog, 2)  # written, not fsynced: invisible
    assert plog.high_watermark == 60
    found = plog.read_for_send(0, 1 << 30)
    assert isinstance(found.data, FileRange)
    assert _sent_through_a_socket(found.data) == b"".join(stored)
    found.data.release()
    assert plog.read_for_send(60, 1 << 30).data == b""


def test_bytes_not_checked_in_this_process_are_read_and_checked_first(logs: Logs) -> None:
    first = logs.open(segment_max_bytes=4096)
    stored = _append(first, 6, records=10)  # several segments
    first.close()
    plog = logs.open(segment_max_bytes=4096)
    checked = plog.read_for_send(0, 1 << 20)
    assert isinstance(checked.data, bytes)  # read through the copying path, CRC-checked
    assert checked.data.startswith(stored[0])
    again = plog.read_for_send(0, 1 << 20)
    assert isinstance(again.data, FileRange)  # now known good: zero-copy
    assert again.data.read() == checked.data
    again.data.release()


def test_a_corrupt_batch_of_an_earlier_run_is_never_handed_out_as_a_range(logs: Logs) -> None:
    first = logs.open(segment_max_bytes=4096)
    _append(first, 6, records=10)
    first.close()
    sealed = sorted(p for p in logs.directory.iterdir() if p.suffix == ".seg")[0]
    raw = bytearray(sealed.read_bytes())
    raw[100] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    sealed.write_bytes(bytes(raw))
    plog = logs.open(segment_max_bytes=4096)
    for _ in range(2):
        with pytest.raises(CorruptRecordError):
            plog.read_for_send(0, 1 << 20)


def test_a_range_keeps_its_bytes_when_retention_deletes_the_segment(logs: Logs, tmp_path: Path) -> None:
    plog = logs.open(segment_max_bytes=4096, retention_bytes=1)
    stored = _append(plog, 6, records=10)
    found = plog.read_for_send(0, 1 << 20)
    assert isinstance(found.data, FileRange)
    assert plog.enforce_retention()  # the segment under the range is unlinked
    assert not Path(found.data.path).exists()
    assert _sent_through_a_socket(found.data).startswith(stored[0])
    found.data.release()


def test_a_range_keeps_its_descriptor_when_the_file_budget_evicts_or_the_log_closes(tmp_path: Path) -> None:
    budget = FileBudget(2)  # every other file's use evicts the segment's descriptor
    logs = Logs(tmp_path / "part0")
    plog = logs.open(budget, segment_max_bytes=4096)
    stored = _append(plog, 6, records=10)
    found = plog.read_for_send(0, 1 << 20)
    assert isinstance(found.data, FileRange)
    others = [budget.file(str(tmp_path / f"other{i}")) for i in range(4)]
    for other in others:
        other.append(b"x")  # opens each: the idle descriptors go, the pinned one stays
    plog.close()
    assert _sent_through_a_socket(found.data).startswith(stored[0])
    found.data.release()
    for other in others:
        other.close()
    assert budget.open_files == 0  # the pin was the last user: released, closed


def test_a_range_sends_the_file_it_was_computed_on_when_a_rewrite_replaces_it(logs: Logs) -> None:
    """A cleaner renames a rewritten file over the segment's path: the range still sends the original."""
    plog = logs.open(segment_max_bytes=4096)
    stored = _append(plog, 6, records=10)
    found = plog.read_for_send(0, 1 << 20)
    assert isinstance(found.data, FileRange)
    replacement = logs.directory / "rewritten.tmp"
    replacement.write_bytes(b"\x00" * found.data.length)
    os.replace(replacement, found.data.path)
    assert _sent_through_a_socket(found.data) == found.data.read()
    assert found.data.read().startswith(stored[0])
    found.data.release()


def test_a_plain_file_hands_out_a_duplicate_descriptor_and_a_memory_file_none(logs: Logs, tmp_path: Path) -> None:
    plog = logs.open()  # OsFile
    _append(plog, 2)
    found = plog.read_for_send(0, 1 << 20)
    assert isinstance(found.data, FileRange)
    plog.close()  # closes the log's own descriptors; the duplicate stays valid
    assert decode_batches(found.data.read(), "t", 0, 0)[0].offset == 0
    found.data.release()
    found.data.release()  # idempotent

    memory = PartitionLog(str(tmp_path / "mem"), "t", 0, LogConfig(), file_factory=MemoryFile)
    try:
        memory.append(make_batch(3))
        assert isinstance(memory.read_for_send(0, 1 << 20).data, bytes)
    finally:
        memory.close()


def test_verified_spans_merge_bound_and_cut() -> None:
    spans = VerifiedSpans()
    spans.add(0, 100)
    spans.add(100, 200)  # adjacent: one span
    spans.add(300, 400)
    assert spans.spans() == [(0, 200), (300, 400)]
    assert (spans.end_from(50), spans.end_from(250), spans.end_from(300)) == (200, 250, 400)
    spans.add(150, 350)  # bridges both
    assert spans.spans() == [(0, 400)]
    spans.cut(120)
    assert spans.spans() == [(0, 120)]
    for i in range(MAX_SPANS + 10):
        spans.add(1000 + 10 * i, 1005 + 10 * i)
    assert len(spans) == MAX_SPANS
    assert spans.end_from(0) == 120  # the longest spans are kept


def test_a_range_of_only_empty_batches_is_never_the_answer_the_read_goes_on_to_a_record(logs: Logs) -> None:
    """A sealed segment that ends in empty batches (what the cleaner leaves over removed records): a
    zero-copy read there must carry on to the next record, as the copying read does (docs/adr/0006),
    not hand out a range of empty batches that a client would fetch again forever (KafkaJS)."""
    from lkstream.format.rewrite import empty_batch

    plog = logs.open(segment_max_bytes=1024)
    plog.append(make_batch(1, value_size=10))
    plog.close()
    (segment,) = logs.directory.glob("*.seg")
    with segment.open("ab") as f:  # offsets 1-5, no record; recovery checks it at the next open
        f.write(empty_batch(1, 4, 0))
    plog = logs.open(segment_max_bytes=1024)
    assert plog.high_watermark == 6
    _append(plog, 1, records=3, value_size=2000)  # past segment_max_bytes: the empty batch ends a sealed segment
    assert sorted(p.name for p in logs.directory.glob("*.seg"))[1].startswith("00000000000000000006")
    found = plog.read_for_send(1, 1 << 20)
    assert not isinstance(found.data, FileRange), "a range of empty batches only"
    offsets = [r.offset for r in decode_batches(bytes(found.data), "t", 0, min_offset=1)]
    assert offsets and offsets[0] == 6, offsets
