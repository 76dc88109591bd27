"""Log compaction against a model of what Kafka promises (issue 24).

Random keyed produces (some tombstones), clock advances, time-based rolls, cleaner
passes with random ``delete.retention.ms``, ``min.compaction.lag.ms`` and key-map
budgets (small ones force several passes), DeleteRecords-free reopens. After every
step the whole log is read from its start, stepping over removed offsets, and held to
the guarantees of docs/durability.md, "Log compaction":

* offsets and order never change: every record read is the record produced at that
  offset, offsets increase, and the log end offset is the number of records produced;
* a reader from the start sees the final state: the latest value of every live key,
  and for a deleted key either its tombstone or nothing;
* the latest record of a key is never removed, unless it is a tombstone some pass ran
  at least ``delete.retention.ms`` after it was written;
* a caught-up reader sees every record: nothing of the active segment is ever removed;
* the log's last record is always there, so a Kafka client's position, which advances by the
  records it is given, reaches the log end offset (ADR 0006);
* a read from any offset returns exactly the records of the full read at or after it.

Hypothesis is derandomized, so a failure replays as printed.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from lkstream.format.batch import span_of_whole_batches
from lkstream.format.codec import Record, decode_batches, encode_batch
from lkstream.storage.cleaner import CleanerPolicy, clean_pass
from lkstream.storage.clock import ManualClock
from lkstream.storage.keymap import new_key_map
from lkstream.storage.log import LogConfig, PartitionLog

KEYS = [f"k{i}".encode() for i in range(6)]
produce_st = st.lists(
    st.tuples(st.sampled_from(KEYS), st.none() | st.binary(min_size=1, max_size=60)), min_size=1, max_size=4
)


@dataclass
class Produced:
    key: bytes
    value: bytes | None
    at_ms: int


@dataclass
class Model:
    records: list[Produced] = field(default_factory=list)
    cleans: list[tuple[int, int]] = field(default_factory=list)  # (time, delete_retention_ms) of each pass

    def latest(self) -> dict[bytes, int]:
        return {r.key: offset for offset, r in enumerate(self.records)}

    def tombstone_may_be_gone(self, produced: Produced) -> bool:
        return any(at >= produced.at_ms + retention for at, retention in self.cleans)


class CompactionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="lkstream-compaction-")
        self.clock = ManualClock()
        self.model = Model()
        self.plog: PartitionLog | None = None
        self.config = LogConfig()

    @initialize(segment_max_bytes=st.integers(150, 600), segment_ms=st.sampled_from([-1, 50, 400]))
    def open_log(self, segment_max_bytes: int, segment_ms: int) -> None:
        self.config = LogConfig(segment_max_bytes=segment_max_bytes, index_interval_bytes=100, segment_ms=segment_ms)
        self.plog = PartitionLog(self.dir, "t", 0, self.config, clock=self.clock)

    def teardown(self) -> None:
        if self.plog is not None:
            self.plog.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def log(self) -> PartitionLog:
        assert self.plog is not None
        return self.plog

    # -- rules -----------------------------------------------------------------------------------

    @rule(records=produce_st)
    def produce(self, records: list[tuple[bytes, bytes | None]]) -> None:
        result = self.log.append(encode_batch(records, timestamp_ms=self.clock.now_ms()))
        assert result.base_offset == len(self.model.records)
        self.model.records += [Produced(k, v, self.clock.now_ms()) for k, v in records]

    @rule(ms=st.integers(1, 300))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule()
    def roll_quiet(self) -> None:
        self.log.roll_if_due()

    @rule(
        delete_retention_ms=st.sampled_from([0, 100, 1000]),
        min_lag_ms=st.sampled_from([0, 200]),
        budget=st.sampled_from([24 * 6, 1 << 16]),
        ratio=st.sampled_from([0.0, 0.5]),
    )
    def clean(self, delete_retention_ms: int, min_lag_ms: int, budget: int, ratio: float) -> None:
        policy = CleanerPolicy(delete_retention_ms, min_lag_ms, 2**63 - 1, ratio)
        now = self.clock.now_ms()
        stats = clean_pass(self.log.cleaning_snapshot(), policy, new_key_map(budget), now, self.log.replace_segments)
        self.log.set_clean_end(stats.map_end, stats.tombstones_due_ms)
        self.model.cleans.append((now, delete_retention_ms))

    @precondition(lambda self: self.plog is not None)
    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.plog = PartitionLog(self.dir, "t", 0, self.config, clock=self.clock)

    @rule(data=st.data())
    def read_from_anywhere(self, data: st.DataObject) -> None:
        end = self.log.high_watermark
        if end == 0:
            return
        offset = data.draw(st.integers(self.log.log_start_offset, end - 1))
        whole = [r for r in self._read_all() if r.offset >= offset]
        assert [(r.offset, r.value) for r in self._read_all(offset)] == [(r.offset, r.value) for r in whole]

    # -- the guarantees -------------------------------------------------------------------------------

    def _read_all(self, start: int = 0) -> list[Record]:
        out: list[Record] = []
        offset = start
        while offset < self.log.high_watermark:
            data = self.log.read(offset, 1 << 20).data
            out += decode_batches(data, "t", 0, offset)
            _, after = span_of_whole_batches(data, offset)
            assert after > offset, f"no progress reading at {offset}"
            offset = after
        return out

    @invariant()
    def compaction_keeps_kafkas_promises(self) -> None:
        if self.plog is None:
            return
        records = self._read_all()
        produced = self.model.records
        assert self.log.next_offset == len(produced), "the log end offset changed"
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets)), "offsets out of order or repeated"
        for r in records:
            original = produced[r.offset]
            assert (r.key, r.value) == (original.key, original.value), f"offset {r.offset} changed"
        present = set(offsets)
        active_base = self.log.cleaning_snapshot().active_base
        assert set(range(active_base, len(produced))) <= present, "a record of the active segment went"
        assert not produced or len(produced) - 1 in present, "the log's last record went"
        state: dict[bytes | None, bytes | None] = {}
        for r in records:
            state[r.key] = r.value
        for key, offset in self.model.latest().items():
            latest = produced[offset]
            if latest.value is not None:
                assert offset in present, f"the latest record of {key!r} (offset {offset}) went"
                assert state[key] == latest.value
            elif offset not in present:
                assert self.model.tombstone_may_be_gone(latest), f"tombstone {offset} went before its horizon"
                assert key not in state, f"{key!r} came back to life: its tombstone went, an older value stayed"
            else:
                assert state[key] is None


CompactionMachine.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCompaction = CompactionMachine.TestCase
