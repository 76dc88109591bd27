"""Bounded decompression of a batch's records section (Kafka codecs 1-4).

Every codec here stops at ``max_bytes`` of output, so a small compressed batch
cannot inflate into gigabytes (a compression bomb) before anything looks at it
(issue 12, finding 3):

* gzip (1): :func:`zlib.decompressobj` with ``max_length``, one gzip member;
* snappy (2): raw snappy (its header states the output length, checked before
  anything is inflated) or the xerial framing Java's snappy-java writes (a
  16-byte header, then blocks ``[4-byte length][raw snappy]``, each checked the same way);
* lz4 (3) and zstd (4): the frame formats, inflated by cramjam straight into a
  buffer of exactly ``max_bytes`` (an anonymous ``mmap``: pages are only
  allocated as they are written); cramjam refuses to write past it.

Anything that is not a complete, valid stream raises :class:`CompressionError`;
output beyond the bound raises :class:`DecompressedTooLarge`. Both are plain
``ValueError``\\ s: callers turn them into the error of their boundary
(``InvalidArgumentError`` for a producer's batch, ``CorruptRecordError`` for one read from disk).
"""

from __future__ import annotations

import mmap
import struct
import zlib
from typing import Final

import cramjam

GZIP: Final = 1
SNAPPY: Final = 2
LZ4: Final = 3
ZSTD: Final = 4

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = 16
_BLOCK_LENGTH: Final = struct.Struct(">i")
# gzip only (not zlib or raw deflate): Kafka's gzip codec is the gzip file format.
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS


class CompressionError(ValueError):
    """The compressed records are not a complete, valid stream of their codec."""


class DecompressedTooLarge(ValueError):
    """The records would inflate beyond the allowed number of bytes."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"compressed records inflate beyond the limit of {limit} bytes")
        self.limit = limit


def decompress(codec: int, data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    """The records section of a batch compressed with ``codec``, at most ``max_bytes`` of it."""
    if codec == GZIP:
        return _gzip(data, max_bytes)
    if codec == SNAPPY:
        return _snappy(bytes(data), max_bytes)
    if codec == LZ4:
        return _into_bounded_buffer("lz4", cramjam.lz4, data, max_bytes)
    if codec == ZSTD:
        return _into_bounded_buffer("zstd", cramjam.zstd, data, max_bytes)
    raise CompressionError(f"unknown compression codec {codec}")


def _gzip(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    inflater = zlib.decompressobj(_GZIP_WBITS)
    try:
        out = inflater.decompress(data, max_bytes + 1)
    except zlib.error as exc:
        raise CompressionError(f"gzip: {exc}") from None
    if len(out) > max_bytes or inflater.unconsumed_tail:
        raise DecompressedTooLarge(max_bytes)
    if not inflater.eof:
        raise CompressionError("gzip: truncated stream")
    if inflater.unused_data:
        raise CompressionError(f"gzip: {len(inflater.unused_data)} bytes after the end of the stream")
    return out


def _snappy(data: bytes, max_bytes: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_block(data, max_bytes)
    if len(data) < _XERIAL_HEADER:
        raise CompressionError("snappy: truncated xerial header")
    parts: list[bytes] = []
    left, pos = max_bytes, _XERIAL_HEADER
    while pos < len(data):
        if len(data) - pos < _BLOCK_LENGTH.size:
            raise CompressionError("snappy: truncated xerial block length")
        (length,) = _BLOCK_LENGTH.unpack_from(data, pos)
        pos += _BLOCK_LENGTH.size
        if not 0 < length <= len(data) - pos:
            raise CompressionError(
                f"snappy: xerial block length {length} does not fit the {len(data) - pos} bytes left"
            )
        block = _snappy_block(data[pos : pos + length], left)
        parts.append(block)
        left -= len(block)
        pos += length
    return b"".join(parts)


def _snappy_block(block: bytes, max_bytes: int) -> bytes:
    try:
        size = cramjam.snappy.decompress_raw_len(block)  # the stream's own header: nothing inflated yet
    except cramjam.DecompressionError as exc:
        raise CompressionError(f"snappy: {exc}") from None
    if size > max_bytes:
        raise DecompressedTooLarge(max_bytes)
    try:
        out = bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as exc:
        raise CompressionError(f"snappy: {exc}") from None
    if len(out) != size:
        raise CompressionError(f"snappy: {len(out)} bytes inflated, the header says {size}")
    return out


def _into_bounded_buffer(name: str, codec: object, data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    if max_bytes <= 0:
        raise DecompressedTooLarge(max_bytes)
    # Anonymous memory: untouched pages cost nothing, so the bound costs only what is written.
    with mmap.mmap(-1, max_bytes) as out:
        try:
            written = codec.decompress_into(data, out)  # type: ignore[attr-defined]
        except cramjam.DecompressionError as exc:
            if "failed to write whole buffer" in str(exc):
                raise DecompressedTooLarge(max_bytes) from None
            raise CompressionError(f"{name}: {exc}") from None
        return out[:written]
