"""lkstream.storage.keymap: the cleaner's bounded map of hashed keys (issue 24)."""

from __future__ import annotations

import tracemalloc

import pytest

from lkstream.storage import keymap
from lkstream.storage.keymap import DICT_ENTRY_BYTES, SLOT_BYTES, DigestDictMap, new_key_map

# SipHash-2-4 with a 128-bit tag: the reference vectors (key 00..0f, message 00..n-1) of the
# algorithm's authors (github.com/veorq/SipHash, vectors.h, vectors_sip128).
SIPHASH128_VECTORS = {
    0: "a3817f04ba25a8e66df67214c7550293",
    1: "da87c1d86b99af44347659119b22fc45",
    2: "8177228da4a45dc7fca38bdef60affe4",
    8: "3b62a9ba6258f5610f83e264f31497b4",
    9: "264499060ad9baabc47f8b02bb6d71ed",
}


def _require_native() -> None:
    # Not a skip: `make venv` builds the C extension, so a missing one is a build failure to see here.
    assert keymap.NATIVE, "lkstream.storage._keymap is not built: run `make venv`"


@pytest.mark.parametrize(("length", "tag"), sorted(SIPHASH128_VECTORS.items()))
def test_the_c_map_hashes_with_reference_siphash128(length: int, tag: str) -> None:
    _require_native()
    from lkstream.storage import _keymap  # type: ignore[attr-defined]

    assert _keymap.siphash128(bytes(range(16)), bytes(range(length))).hex() == tag


@pytest.mark.parametrize("native", [True, False])
def test_a_map_keeps_the_latest_offset_and_refuses_new_keys_when_full(native: bool) -> None:
    if native:
        _require_native()
    m = new_key_map(SLOT_BYTES * 10 if native else DICT_ENTRY_BYTES * 9, native=native)
    assert m.max_entries == 9
    assert all(m.put(f"k{i}".encode(), i) for i in range(9))
    assert not m.put(b"new", 100) and m.get(b"new") == -1 and len(m) == 9
    assert m.put(b"k3", 50), "a known key is always taken"
    assert m.put(b"k3", 7) and m.get(b"k3") == 50, "the larger offset wins"
    assert m.get(b"k8") == 8 and m.get(b"") == -1


def test_digests_are_keyed_so_two_maps_disagree() -> None:
    a, b = DigestDictMap(10, b"a" * 16), DigestDictMap(10, b"b" * 16)
    assert a._digest(b"key") != b._digest(b"key")


def test_the_c_map_takes_27_bytes_a_key_whatever_the_key_size() -> None:
    _require_native()
    m = new_key_map(24_000_000)
    assert m.nbytes == 24_000_000 and m.max_entries == 900_000 == keymap.keys_within(24_000_000)
    assert m.nbytes / m.max_entries < 27


def test_the_dict_map_costs_what_its_budget_says() -> None:
    """DICT_ENTRY_BYTES is measured, not guessed: within 15% of what 50,000 entries allocate."""
    m = DigestDictMap(50_000, b"s" * 16)
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        for i in range(50_000):
            m.put(f"key-{i:08d}".encode() * 4, 10**9 + i)
        used, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    per_key = (used - base) / 50_000
    assert DICT_ENTRY_BYTES * 0.85 <= per_key <= DICT_ENTRY_BYTES * 1.15, per_key
