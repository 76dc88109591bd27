"""Client-side preparation of produce calls: normalising records and cutting them into batches.

Shared by the embedded broker and the remote client, so both accept the same
record shapes, report the same errors and cut batches at the same sizes.
Pure functions over in-memory values; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from lkstream.errors import InvalidArgumentError
from lkstream.format.batch import HEADER_SIZE
from lkstream.format.codec import Headers, KeyValue

# Upper bound of the varint framing and attributes around one record's key and value.
RECORD_OVERHEAD: Final = 21
BATCH_OVERHEAD: Final = HEADER_SIZE


def to_bytes(value: object, what: str) -> bytes | None:
    """``str`` (UTF-8), ``bytes``-like or ``None``, as bytes; anything else is an InvalidArgumentError."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise InvalidArgumentError(f"{what} must be bytes, str or None, got {type(value).__name__}")


def check_headers(headers: object) -> Headers:
    """Headers are a list or tuple of ``(str, bytes | None)`` pairs."""
    if not isinstance(headers, (list, tuple)):
        raise InvalidArgumentError("headers must be a list of (str, bytes | None) pairs")
    for pair in headers:
        if (
            not isinstance(pair, tuple)
            or len(pair) != 2
            or not isinstance(pair[0], str)
            or not (pair[1] is None or isinstance(pair[1], bytes))
        ):
            raise InvalidArgumentError(f"invalid header {pair!r}: expected (str, bytes | None)")
    return headers


def normalise_records(records: Sequence[Any]) -> tuple[list[KeyValue], list[Headers] | None]:
    """``(key, value[, headers])`` items as bytes pairs plus per-record headers (None when no item has any)."""
    if isinstance(records, (bytes, str)) or not isinstance(records, Sequence):
        raise InvalidArgumentError("records must be a sequence of (key, value) tuples")
    pairs: list[KeyValue] = []
    headers: list[Headers] | None = None
    for n, item in enumerate(records):
        if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
            raise InvalidArgumentError(f"record {n} must be a (key, value) or (key, value, headers) tuple")
        key, value = item[0], item[1]
        if not (key is None or type(key) is bytes):
            key = to_bytes(key, "key")
        if type(value) is not bytes:
            value = to_bytes(value, "value")
        pairs.append((key, value))
        if len(item) == 3:
            if headers is None:
                headers = [()] * n
            headers.append(check_headers(item[2]))
        elif headers is not None:
            headers.append(())
    return pairs, headers


def record_sizes(pairs: Sequence[KeyValue]) -> list[int]:
    """Key plus value bytes of each record (what ``max_message_bytes`` limits)."""
    return [len(k or b"") + len(v or b"") for k, v in pairs]


def chunk_by_size(indices: list[int], sizes: Sequence[int], max_batch_bytes: int) -> list[list[int]]:
    """Cut one partition's records (``indices`` into ``sizes``) into batches below ``max_batch_bytes``."""
    budget = max_batch_bytes - BATCH_OVERHEAD
    if sum(sizes[i] for i in indices) + RECORD_OVERHEAD * len(indices) <= budget:
        return [indices]
    chunks: list[list[int]] = []
    chunk: list[int] = []
    used = 0
    for i in indices:
        size = sizes[i] + RECORD_OVERHEAD
        if chunk and used + size > budget:
            chunks.append(chunk)
            chunk, used = [], 0
        chunk.append(i)
        used += size
    if chunk:
        chunks.append(chunk)
    return chunks
