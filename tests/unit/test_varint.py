"""The unsigned varint writer against protobuf's own encoding and its reader in the Kafka codec."""

from __future__ import annotations

from google.protobuf.internal.encoder import _VarintBytes  # type: ignore[import-untyped]
from hypothesis import example, given
from hypothesis import strategies as st

from lkstream.format.varint import uvarint
from lkstream.kafka.protocol import read_uvarint


@given(st.integers(min_value=0, max_value=2**64 - 1))
@example(0)
@example(0x7F)
@example(0x80)
def test_uvarint_matches_protobuf_and_reads_back(value: int) -> None:
    raw = uvarint(value)
    assert raw == _VarintBytes(value)
    if value < 2**32:  # Kafka's unsigned varints carry 32 bits
        assert read_uvarint(raw, 0) == (value, len(raw))
