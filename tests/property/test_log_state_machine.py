"""PartitionLog against a plain in-memory model: appends, reads, rotation, retention, reopen.

The model keeps the records and the segment layout (a list of segments with
their base offset, byte size and batch sizes), and follows the log's documented
rules: roll before a batch that would push a non-empty active segment past
``segment_max_bytes``; retention deletes the oldest sealed segments while the
rest still hold at least ``retention_bytes`` or while their newest record is
older than ``retention_ms`` (time comes from a ManualClock); with
``visible_after_fsync`` a reader sees only what a flush or a rotation made durable.

Hypothesis is derandomized (a fixed seed per test) so a failure replays
exactly; it prints the failing rule sequence as a reproducible program.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from lkstream.errors import OffsetOutOfRangeError
from lkstream.format.batch import check_batch
from lkstream.format.codec import decode_batches, encode_batch
from lkstream.storage.clock import ManualClock
from lkstream.storage.log import LogConfig, PartitionLog

KeyValue = tuple[bytes | None, bytes | None]

records_st = st.lists(
    st.tuples(st.none() | st.binary(max_size=8), st.none() | st.binary(min_size=1, max_size=120)),
    min_size=1,
    max_size=6,
)


@dataclass
class ModelSegment:
    base: int
    size: int = 0
    max_timestamp: int = -1


@dataclass
class Model:
    records: list[KeyValue] = field(default_factory=list)
    start: int = 0
    durable: int = 0  # offsets below this are fsynced (matters with visible_after_fsync)
    segments: list[ModelSegment] = field(default_factory=lambda: [ModelSegment(0)])

    @property
    def next_offset(self) -> int:
        return self.start + len(self.records)

    def record(self, offset: int) -> KeyValue:
        return self.records[offset - self.start]


class PartitionLogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="lkstream-sm-")
        self.clock = ManualClock()
        self.model = Model()
        self.plog: PartitionLog | None = None

    # -- setup and teardown --------------------------------------------------------------------

    @initialize(
        segment_max_bytes=st.integers(100, 700),
        index_interval_bytes=st.sampled_from([0, 90, 300, 4096]),
        retention_bytes=st.sampled_from([-1, 0, 200, 600, 1500]),
        retention_ms=st.sampled_from([-1, 0, 100, 1000]),
        visible_after_fsync=st.booleans(),
    )
    def open_log(
        self,
        segment_max_bytes: int,
        index_interval_bytes: int,
        retention_bytes: int,
        retention_ms: int,
        visible_after_fsync: bool,
    ) -> None:
        self.config = LogConfig(
            segment_max_bytes=segment_max_bytes,
            index_interval_bytes=index_interval_bytes,
            retention_bytes=retention_bytes,
            retention_ms=retention_ms,
            visible_after_fsync=visible_after_fsync,
        )
        self.plog = self._open()

    def _open(self) -> PartitionLog:
        return PartitionLog(self.dir, "t", 0, self.config, clock=self.clock)

    def teardown(self) -> None:
        if self.plog is not None:
            self.plog.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def log(self) -> PartitionLog:
        assert self.plog is not None
        return self.plog

    @property
    def high_watermark(self) -> int:
        return self.model.durable if self.config.visible_after_fsync else self.model.next_offset

    # -- rules ---------------------------------------------------------------------------------

    @rule(batches=st.lists(records_st, min_size=1, max_size=6))
    def append(self, batches: list[list[KeyValue]]) -> None:
        for records in batches:
            self._append_one(records)

    def _append_one(self, records: list[KeyValue]) -> None:
        batch = encode_batch(records, timestamp_ms=self.clock.now_ms())
        size = len(batch)
        active = self.model.segments[-1]
        if active.size > 0 and active.size + size > self.config.segment_max_bytes:
            # Rotation fsyncs the old segment: everything before the new base is durable.
            self.model.segments.append(ModelSegment(self.model.next_offset))
            self.model.durable = self.model.next_offset
            active = self.model.segments[-1]
        result = self.log.append(batch)
        assert result.base_offset == self.model.next_offset
        assert result.last_offset == self.model.next_offset + len(records) - 1
        assert check_batch(batch).base_offset == result.base_offset  # stamped in place
        active.size += size
        active.max_timestamp = max(active.max_timestamp, self.clock.now_ms())
        self.model.records.extend(records)

    @rule(ms=st.integers(0, 400))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(data=st.data(), max_bytes=st.integers(1, 3000))
    def read(self, data: st.DataObject, max_bytes: int) -> None:
        high = self.high_watermark
        offset = data.draw(st.integers(self.model.start, high), label="offset")
        result = self.log.read(offset, max_bytes)
        assert (result.log_start_offset, result.high_watermark) == (self.model.start, high)
        got = decode_batches(result.data, "t", 0, offset)
        if offset == high:
            assert result.data == b""
            return
        assert got, f"read at {offset} below the high watermark {high} returned no records"
        assert got[0].offset == offset
        for record in got:
            assert record.offset < high
            assert (record.key, record.value) == self.model.record(record.offset)
        assert [r.offset for r in got] == list(range(offset, offset + len(got)))

    @rule(data=st.data())
    def read_out_of_range(self, data: st.DataObject) -> None:
        high = self.high_watermark
        below = st.integers(-5, self.model.start - 1) if self.model.start > 0 else st.integers(-5, -1)
        offset = data.draw(below | st.integers(high + 1, high + 50), label="offset")
        try:
            self.log.read(offset, 1000)
        except OffsetOutOfRangeError as exc:
            assert (exc.earliest, exc.latest) == (self.model.start, high)
        else:
            raise AssertionError(f"read at {offset} outside [{self.model.start}, {high}] did not raise")

    @rule(max_bytes=st.integers(1, 2000))
    def read_everything(self, max_bytes: int) -> None:
        """A consumer loop from the log start to the high watermark sees exactly the model."""
        offset, seen = self.model.start, []
        high = self.high_watermark
        while offset < high:
            got = decode_batches(self.log.read(offset, max_bytes).data, "t", 0, offset)
            assert got and got[0].offset == offset
            seen.extend((r.key, r.value) for r in got)
            offset = got[-1].offset + 1
        assert offset == high
        assert seen == self.model.records[: high - self.model.start]

    @rule()
    def flush(self) -> None:
        assert self.log.flush() == self.model.next_offset
        self.model.durable = self.model.next_offset

    @rule()
    def enforce_retention(self) -> None:
        deleted = self.log.enforce_retention()
        retention_bytes, retention_ms = self.config.retention_bytes, self.config.retention_ms
        expected: list[int] = []
        total = sum(s.size for s in self.model.segments)
        cutoff = self.clock.now_ms() - retention_ms
        for segment in self.model.segments[:-1]:
            too_big = retention_bytes >= 0 and total - segment.size >= retention_bytes
            too_old = retention_ms >= 0 and segment.max_timestamp < cutoff
            if not (too_big or too_old):
                break
            expected.append(segment.base)
            total -= segment.size
        assert deleted == expected
        if expected:
            dropped = self.model.segments[len(expected)].base - self.model.start
            del self.model.records[:dropped]
            del self.model.segments[: len(expected)]
            self.model.start = self.model.segments[0].base
            self.model.durable = max(self.model.durable, self.model.start)

    @rule(data=st.data())
    def reopen_with_new_retention(self, data: st.DataObject) -> None:
        """Reopen with retention limits at, just below and just above the byte boundaries."""
        sizes = [s.size for s in self.model.segments]
        suffix_sums = [sum(sizes[i:]) for i in range(1, len(sizes))] or [0]
        retention_bytes = data.draw(
            st.sampled_from([-1, *suffix_sums]).flatmap(lambda b: st.sampled_from([b, b - 1, b + 1] if b > 0 else [b])),
            label="retention_bytes",
        )
        retention_ms = data.draw(st.sampled_from([-1, 0, 100, 1000]), label="retention_ms")
        self.log.close()
        self.config = LogConfig(
            segment_max_bytes=self.config.segment_max_bytes,
            index_interval_bytes=self.config.index_interval_bytes,
            retention_bytes=retention_bytes,
            retention_ms=retention_ms,
            visible_after_fsync=self.config.visible_after_fsync,
        )
        self.plog = self._open()
        self.model.durable = self.model.next_offset
        self.enforce_retention()

    @rule()
    def close_and_reopen(self) -> None:
        self.log.close()
        self.plog = self._open()
        assert self.log.recovery.truncated_bytes == 0
        self.model.durable = self.model.next_offset  # close fsyncs everything

    @precondition(lambda self: self.plog is not None)
    @rule()
    def abandon_and_reopen(self) -> None:
        """Drop the log without close(): no final flush, index or checkpoint (a process crash)."""
        old = self.log
        with old._lock:
            old._closed = True
            for segment in old._segments:
                segment.close()
        self.plog = self._open()
        # The page cache keeps every written byte in this process, so nothing is lost.
        assert self.log.recovery.truncated_bytes == 0
        self.model.durable = self.model.next_offset

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def bounds_match_the_model(self) -> None:
        if self.plog is None:
            return
        stats = self.log.stats()
        assert stats.log_start_offset == self.log.log_start_offset == self.model.start
        assert stats.next_offset == self.log.next_offset == self.model.next_offset
        assert stats.high_watermark == self.high_watermark
        assert stats.segment_count == len(self.model.segments)
        assert stats.size_bytes == sum(s.size for s in self.model.segments)
        assert stats.active_segment_bytes == self.model.segments[-1].size


PartitionLogMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestPartitionLog = PartitionLogMachine.TestCase
