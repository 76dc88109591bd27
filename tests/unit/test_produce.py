"""format/produce.py: the record shapes every producer surface accepts, and how batches are cut."""

from __future__ import annotations

import pytest

from lkstream.errors import InvalidArgumentError
from lkstream.format.produce import (
    BATCH_OVERHEAD,
    RECORD_OVERHEAD,
    chunk_by_size,
    normalise_records,
    record_sizes,
    to_bytes,
)


def test_normalise_turns_str_keys_and_values_into_utf8_bytes() -> None:
    pairs, headers = normalise_records([("AAPL", "é"), (None, b"x"), (bytearray(b"k"), memoryview(b"v"))])
    assert pairs == [(b"AAPL", "é".encode()), (None, b"x"), (b"k", b"v")]
    assert headers is None


def test_normalise_keeps_headers_aligned_with_records() -> None:
    pairs, headers = normalise_records([(None, b"a"), (None, b"b", [("h", b"1")]), (None, b"c")])
    assert len(pairs) == 3
    assert headers == [(), [("h", b"1")], ()]


@pytest.mark.parametrize("records", [b"raw", "text", 42, [b"not a tuple"], [(b"k",)], [(b"k", b"v", [], 4)]])
def test_normalise_rejects_other_shapes(records: object) -> None:
    with pytest.raises(InvalidArgumentError):
        normalise_records(records)  # type: ignore[arg-type]


@pytest.mark.parametrize("headers", ["h", [("h", "not bytes")], [(1, b"v")], [("only-key",)]])
def test_normalise_rejects_bad_headers(headers: object) -> None:
    with pytest.raises(InvalidArgumentError, match="header"):
        normalise_records([(None, b"v", headers)])


def test_to_bytes_rejects_numbers() -> None:
    with pytest.raises(InvalidArgumentError, match="value must be bytes"):
        to_bytes(3, "value")


def test_record_sizes_count_key_and_value() -> None:
    assert record_sizes([(b"ab", b"cde"), (None, None)]) == [5, 0]


def test_small_records_stay_in_one_batch() -> None:
    assert chunk_by_size([0, 1, 2], [10, 10, 10], 1 << 20) == [[0, 1, 2]]


def test_chunks_stay_below_the_batch_limit_and_keep_order() -> None:
    sizes = [100] * 50
    limit = BATCH_OVERHEAD + 10 * (100 + RECORD_OVERHEAD)
    chunks = chunk_by_size(list(range(50)), sizes, limit)
    assert [i for chunk in chunks for i in chunk] == list(range(50))
    assert all(len(c) * (100 + RECORD_OVERHEAD) + BATCH_OVERHEAD <= limit for c in chunks)
    assert len(chunks) == 5


def test_a_record_larger_than_the_limit_gets_a_batch_of_its_own() -> None:
    assert chunk_by_size([0, 1, 2], [10, 5000, 10], 1000) == [[0], [1], [2]]
