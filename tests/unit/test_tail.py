"""lkstream.broker.tail: the in-memory hot tail of a partition."""

from __future__ import annotations

import gc

from lkstream.broker import tail as tail_module
from lkstream.broker.tail import HotTail, TailBudget


def _batch(base: int, count: int, size: int = 100) -> tuple[int, int, bytes]:
    """A stand-in batch: the tail never looks inside, only at sizes and offsets."""
    return base, base + count, bytes([base % 256]) * size


def _filled(max_bytes: int, batches: int, count: int = 2, size: int = 100) -> HotTail:
    tail = HotTail(max_bytes)
    for i in range(batches):
        tail.add(*_batch(i * count, count, size))
    return tail


def test_read_returns_batches_from_the_one_holding_offset() -> None:
    tail = _filled(10_000, 4)  # offsets 0-1, 2-3, 4-5, 6-7
    data = tail.read(3, 10_000, high_watermark=8)
    assert data == bytes([2]) * 100 + bytes([4]) * 100 + bytes([6]) * 100


def test_read_honours_max_bytes_but_returns_at_least_one_batch() -> None:
    tail = _filled(10_000, 4)
    assert tail.read(0, 1, 8) == bytes([0]) * 100
    assert tail.read(0, 250, 8) == bytes([0]) * 100 + bytes([2]) * 100


def test_read_stops_at_the_high_watermark() -> None:
    tail = _filled(10_000, 4)
    assert tail.read(0, 10_000, high_watermark=4) == bytes([0]) * 100 + bytes([2]) * 100
    assert tail.read(4, 10_000, high_watermark=4) is None  # nothing visible there yet


def test_read_outside_the_cached_range_returns_none() -> None:
    tail = _filled(250, 4)  # holds only the newest two batches: offsets 4-7
    assert tail.read(3, 10_000, 8) is None
    assert tail.read(8, 10_000, 8) is None
    assert tail.read(4, 10_000, 8) == bytes([4]) * 100 + bytes([6]) * 100


def test_add_evicts_oldest_batches_beyond_max_bytes() -> None:
    tail = _filled(300, 10)
    assert tail._bytes <= 300
    assert tail.read(14, 10_000, 20) is not None
    assert tail.read(13, 10_000, 20) is None


def test_a_batch_larger_than_the_tail_empties_it() -> None:
    tail = _filled(300, 2)
    tail.add(*_batch(4, 2, size=301))
    assert tail.read(0, 10_000, 6) is None
    assert tail.read(4, 10_000, 6) is None
    tail.add(*_batch(6, 2))
    assert tail.read(6, 10_000, 8) == bytes([6]) * 100


def test_a_gap_in_offsets_clears_stale_batches() -> None:
    tail = _filled(10_000, 2)  # offsets 0-3
    tail.add(*_batch(10, 2))  # the log moved on without the tail
    assert tail.read(0, 10_000, 12) is None
    assert tail.read(10, 10_000, 12) == bytes([10]) * 100


def test_zero_byte_tail_caches_nothing() -> None:
    tail = HotTail(0)
    tail.add(*_batch(0, 1))
    assert tail.read(0, 10_000, 1) is None


def test_clear_forgets_everything() -> None:
    tail = _filled(10_000, 3)
    tail.clear()
    assert tail.read(0, 10_000, 6) is None


def test_compaction_keeps_reads_correct_after_many_evictions() -> None:
    assert tail_module._COMPACT_AFTER <= 1024
    tail = _filled(1_000, 3_000, count=1, size=100)  # ten batches cached at a time
    assert len(tail._bases) < 3_000  # evicted entries were compacted away
    assert tail.read(2_995, 10_000, 3_000) == b"".join(bytes([o % 256]) * 100 for o in range(2_995, 3_000))
    assert tail.read(2_989, 10_000, 3_000) is None


# -- the broker-wide budget (hot_tail_total_bytes) --------------------------------------------------


def test_a_shared_budget_drops_the_oldest_batches_of_any_tail() -> None:
    budget = TailBudget(500)
    a, b = HotTail(10_000, budget), HotTail(10_000, budget)
    for i in range(3):
        a.add(*_batch(i * 2, 2))  # a: offsets 0-5, 300 bytes
    for i in range(3):
        b.add(*_batch(i * 2, 2))  # b: 300 more
        budget.enforce()  # what Partition.append_batch does after releasing its lock
    assert budget.bytes == 500 and budget.evictions == 1
    assert a.read(0, 10_000, 6) is None  # dropped by the budget: a miss, the log serves it
    assert a.read(2, 10_000, 6) == bytes([2]) * 100 + bytes([4]) * 100
    assert b.read(0, 10_000, 6) == bytes([0]) * 100 + bytes([2]) * 100 + bytes([4]) * 100


def test_a_tail_that_clears_gives_its_bytes_back_to_the_budget() -> None:
    budget = TailBudget(10_000)
    tail = HotTail(10_000, budget)
    for i in range(4):
        tail.add(*_batch(i, 1))
    assert budget.bytes == 400
    tail.clear()
    assert budget.bytes == 0
    tail.add(*_batch(10, 1))  # a tail keeps working after a clear; its old queue entries are stale
    tail.close()
    assert budget.bytes == 0


def test_the_budget_queue_stays_bounded_when_tails_evict_themselves() -> None:
    budget = TailBudget(1 << 30)
    busy, idle = HotTail(300, budget), HotTail(300, budget)
    idle.add(*_batch(0, 1))  # an old live batch at the front of the queue
    for i in range(20_000):
        busy.add(*_batch(i, 1))
    assert budget.bytes == 400
    assert budget.queued() <= 2 * 4 + 2 * tail_module._COMPACT_AFTER
    assert idle.read(0, 10_000, 1) == bytes([0]) * 100


def test_the_budget_queue_holds_no_object_the_gc_tracks() -> None:
    """No tracked object per cached batch: each would count towards a young collection (issue 14, row 3).

    Counted before any collection runs: a tuple of ints is tracked from its creation until a
    collection looks at it, so checking ``gc.is_tracked`` after ``gc.collect()`` proves nothing.
    """
    budget = TailBudget(1 << 30)
    tail = HotTail(1 << 30, budget)
    batches = [_batch(i, 1) for i in range(5000)]
    gc.disable()
    try:
        gc.collect()
        for batch in batches:
            tail.add(*batch)
        grown = gc.get_count()[0]
    finally:
        gc.enable()
    assert budget.queued() == 5000
    assert grown < 50, f"{grown} tracked objects outlived 5,000 appends to the tail"


def test_stale_entries_leave_the_front_of_the_queue_as_new_ones_arrive() -> None:
    """A tail evicting itself must not leave a queue to compact in one long loop on the producer's thread."""
    budget = TailBudget(1 << 30)
    tail = HotTail(300, budget)
    for i in range(10_000):
        tail.add(*_batch(i, 1))
    assert budget.queued() <= 4  # the batches still cached, and the newest one's evicted predecessor
    assert tail.read(9_997, 10_000, 10_000) == b"".join(_batch(i, 1)[2] for i in range(9_997, 10_000))


def test_a_batch_larger_than_the_budget_is_not_cached() -> None:
    tail = HotTail(10_000, TailBudget(150))
    tail.add(*_batch(0, 1, size=200))
    assert tail.read(0, 10_000, 1) is None
