"""lkstream.broker.cleaning and every embedded reader over a cleaned log (issue 24).

The cleaner thread picks the dirtiest due partition; readers (``Broker.read_from``, the
embedded ``Consumer``) step over the offsets a clean left without records: batches that
lost their last records, and the empty batches written over removed ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lkstream import Broker, Consumer
from lkstream.broker.cleaning import Cleaner
from lkstream.errors import StorageError
from lkstream.format.codec import Record
from lkstream.storage.cleaner import CleanerPolicy
from lkstream.storage.clock import ManualClock
from lkstream.storage.log import PartitionLog

from .support import FIXED_TS

SEGMENT_BYTES = 4096


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(FIXED_TS)


@pytest.fixture
def broker(tmp_path: Path, clock: ManualClock) -> Broker:
    with Broker(
        persist_dir=str(tmp_path / "data"), segment_max_bytes=SEGMENT_BYTES, log_cleaner_enabled=False, clock=clock
    ) as opened:
        yield opened


def _overwrite(broker: Broker, topic: str, pid: int, keys: int, rounds: int) -> None:
    for n in range(rounds):
        broker.produce_many_sync(topic, [(f"k{i}".encode(), f"{n}".encode() * 200) for i in range(keys)], partition=pid)


def _cleaner(broker: Broker, clock: ManualClock, compacted: set[str], budget: int = 1 << 20) -> Cleaner:
    def candidates() -> list[tuple[str, int, PartitionLog]]:
        return [(t, pid, broker.partition(t, pid).log) for t in broker.list_topics() for pid in range(1)]

    return Cleaner(
        candidates,
        lambda topic: CleanerPolicy() if topic in compacted else None,
        clock,
        budget_bytes=budget,
        backoff_ms=10,
    )


def test_the_dirtiest_compacted_partition_is_cleaned_first(broker: Broker, clock: ManualClock) -> None:
    for topic, rounds in (("a-calm", 20), ("z-busy", 20), ("plain", 20)):
        broker.create_topic(topic, 1)
        _overwrite(broker, topic, 0, 4, rounds)
    assert _cleaner(broker, clock, {"a-calm"}).run_once() is not None
    _overwrite(broker, "a-calm", 0, 4, 10)  # a little dirty again: a ratio below z-busy's 1.0
    cleaner = _cleaner(broker, clock, {"a-calm", "z-busy"})
    assert cleaner.run_once() is not None
    busy, calm = cleaner.status("z-busy", 0), cleaner.status("a-calm", 0)
    assert busy is not None and calm is not None
    assert (busy.passes, calm.passes) == (1, 0), "the dirtier partition goes first, whatever its name"
    assert 0.5 <= calm.dirty_ratio < 1.0
    assert cleaner.status("plain", 0) is None, "a topic that is not compacted is never looked at"
    assert cleaner.run_once() is not None
    assert cleaner.status("a-calm", 0).passes == 1  # type: ignore[union-attr]
    assert cleaner.run_once() is None, "nothing dirty is left"
    totals = cleaner.snapshot_totals()
    assert totals.passes == 2 and totals.bytes_removed > 0 and totals.records_removed > 0


def test_a_failed_pass_is_counted_and_its_partition_left_alone(
    broker: Broker, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.create_topic("t", 1)
    _overwrite(broker, "t", 0, 4, 12)
    cleaner = _cleaner(broker, clock, {"t"})

    def broken(*args: object, **kwargs: object) -> None:
        raise StorageError("disk on fire", path="/nowhere")

    monkeypatch.setattr("lkstream.broker.cleaning.clean_pass", broken)
    assert cleaner.run_once() is None
    state = cleaner.status("t", 0)
    assert state is not None and "disk on fire" in state.last_error
    monkeypatch.undo()
    assert cleaner.run_once() is None, "a failed partition waits FAILED_BACKOFF_S before its next try"
    assert cleaner.snapshot_totals().failures == 1


def _read_everything(broker: Broker, topic: str, end: int) -> list[Record]:
    out: list[Record] = []
    offset = 0
    while offset < end:
        records = broker.read_from(topic, 0, offset)
        out += records
        offset = records[-1].offset + 1
    return out


def test_embedded_readers_step_over_what_the_cleaner_removed(broker: Broker, clock: ManualClock) -> None:
    broker.create_topic("t", 1)
    _overwrite(broker, "t", 0, 3, 10)
    broker.produce_many_sync("t", [(b"k0", None)], partition=0)  # a tombstone
    _overwrite(broker, "t", 0, 1, 6)  # k0 again: the older k0 records and its tombstone are superseded
    end = broker.partition("t", 0).high_watermark
    expected = {r.key: r.value for r in _read_everything(broker, "t", end)}
    assert _cleaner(broker, clock, {"t"}).run_once() is not None
    # read_from from every offset: never empty below the high watermark, never a removed record.
    seen: dict[bytes | None, bytes | None] = {}
    for offset in range(end):
        records = broker.read_from("t", 0, offset, max_msgs=1)
        assert records, f"read_from({offset}) came back empty below the high watermark"
        assert records[0].offset >= offset
    offset = 0
    while offset < end:
        records = broker.read_from("t", 0, offset, max_msgs=2)
        seen.update((r.key, r.value) for r in records)
        offset = records[-1].offset + 1
    assert seen == expected
    consumer = Consumer(broker, auto_offset_reset="earliest")
    consumer.assign([("t", 0)])
    polled = []
    while records := consumer.poll(timeout=0.5, max_records=1):
        polled += records
    assert {r.key: r.value for r in polled} == expected
    assert consumer.position("t", 0) == end, "the position must reach the end, past the removed offsets"
    consumer.close()
