"""Helpers for the compaction tests (issue 24): keyed appends to a PartitionLog, reads across gaps."""

from __future__ import annotations

from collections.abc import Sequence

from lkstream.format.batch import span_of_whole_batches
from lkstream.format.codec import Compression, Record, decode_batches, encode_batch
from lkstream.storage.cleaner import CleanerPolicy, PassStats, clean_pass
from lkstream.storage.clock import ManualClock
from lkstream.storage.keymap import new_key_map
from lkstream.storage.log import PartitionLog

KeyValues = Sequence[tuple[bytes | None, bytes | None]]


def append(log: PartitionLog, clock: ManualClock, records: KeyValues, codec: Compression = Compression.NONE) -> int:
    """Append one batch of ``records`` stamped with the clock's time; return its base offset."""
    return log.append(encode_batch(list(records), timestamp_ms=clock.now_ms(), compression=codec)).base_offset


def read_all(log: PartitionLog, start: int | None = None) -> list[Record]:
    """Every record from ``start`` (default: the log start) to the high watermark, stepping over gaps."""
    offset = log.log_start_offset if start is None else start
    out: list[Record] = []
    while offset < log.high_watermark:
        data = log.read(offset, 1 << 20).data
        out += decode_batches(data, "t", 0, offset)
        _, after = span_of_whole_batches(data, offset)
        assert after > offset, f"a read at {offset} below the high watermark made no progress"
        offset = after
    return out


def latest(records: Sequence[Record]) -> dict[bytes | None, tuple[int, bytes | None]]:
    """``{key: (offset, value)}`` of the last record of every key."""
    return {r.key: (r.offset, r.value) for r in records}


def clean(
    log: PartitionLog, clock: ManualClock, policy: CleanerPolicy | None = None, budget: int = 1 << 20
) -> PassStats:
    """One cleaner pass over ``log`` now; the clean end is recorded as the broker records it."""
    stats = clean_pass(
        log.cleaning_snapshot(), policy or CleanerPolicy(), new_key_map(budget), clock.now_ms(), log.replace_segments
    )
    log.set_clean_end(stats.map_end, stats.tombstones_due_ms)
    return stats
