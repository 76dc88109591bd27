"""Unsigned LEB128 varints, as protobuf and Kafka's flexible protocol versions write them."""

from __future__ import annotations


def uvarint(value: int) -> bytes:
    """``value`` (>= 0) in 7-bit groups, least significant first, the high bit set on all but the last."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
