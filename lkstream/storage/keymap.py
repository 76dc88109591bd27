"""The cleaner's key map: record key -> offset of its latest record, within a memory budget.

Kafka's cleaner keeps a 16-byte MD5 of each key and an 8-byte offset in an
open-addressing table of fixed size (``log.cleaner.dedupe.buffer.size``). This map
does the same with a keyed 128-bit SipHash-2-4 (``_keymap.c``): 24 bytes a slot,
filled to 90%, so about 26.7 bytes per key whatever the key's size, allocated for one
pass and freed after it. The budget
fixes the number of slots; a new key that does not fit is refused
(:meth:`KeyMapLike.put` returns False) and the cleaner ends its pass there, cleaning
what the map covers and leaving the rest for the next pass.

Without the C extension, :class:`DigestDictMap` keeps the same digests (BLAKE2b,
16 bytes, keyed) in a dict: about 140 bytes per key, so the same budget holds about
five times fewer keys. Both are keyed with a random seed per map, so an outside
producer cannot choose two keys that share a digest (two such keys would share an
entry, and the older key's latest record would be removed as superseded).

Not thread-safe: one cleaner owns a map.
"""

from __future__ import annotations

import hashlib
import os
from typing import Final, Protocol

#: Bytes a slot of the C map takes (16-byte digest, 8-byte offset).
SLOT_BYTES: Final = 24
#: Bytes per key of :class:`DigestDictMap` (a 16-byte ``bytes`` object, an ``int``, the dict's entry and
#: index), measured with tracemalloc by tests/unit/test_keymap.py.
DICT_ENTRY_BYTES: Final = 140


class KeyMapLike(Protocol):
    """What the cleaner needs from a key map."""

    @property
    def max_entries(self) -> int: ...

    @property
    def nbytes(self) -> int: ...

    def __len__(self) -> int: ...

    def put(self, key: bytes, offset: int, /) -> bool:
        """Remember ``offset`` as ``key``'s latest (the larger wins); False (nothing stored) if full."""
        ...

    def get(self, key: bytes, /) -> int:
        """``key``'s latest offset, or -1."""
        ...


class DigestDictMap:
    """The pure-Python key map (see the module docstring)."""

    def __init__(self, max_entries: int, seed: bytes) -> None:
        self.max_entries = max(1, max_entries)
        self._seed = seed
        self._offsets: dict[bytes, int] = {}

    @property
    def nbytes(self) -> int:
        return self.max_entries * DICT_ENTRY_BYTES

    def __len__(self) -> int:
        return len(self._offsets)

    def _digest(self, key: bytes) -> bytes:
        return hashlib.blake2b(key, digest_size=16, key=self._seed).digest()

    def put(self, key: bytes, offset: int, /) -> bool:
        digest = self._digest(key)
        known = self._offsets.get(digest)
        if known is None:
            if len(self._offsets) >= self.max_entries:
                return False
            self._offsets[digest] = offset
        elif offset > known:
            self._offsets[digest] = offset
        return True

    def get(self, key: bytes, /) -> int:
        return self._offsets.get(self._digest(key), -1)


def _native() -> type | None:
    try:
        from lkstream.storage import _keymap  # type: ignore[attr-defined]
    except ImportError:
        return None
    native: type = _keymap.KeyMap
    return native


_NATIVE: Final = _native()
#: Whether the C map is built (without it the dict map holds about five times fewer keys per byte).
NATIVE: Final = _NATIVE is not None


def new_key_map(budget_bytes: int, *, most_keys: int | None = None, native: bool = NATIVE) -> KeyMapLike:
    """A key map within ``budget_bytes``, seeded at random; no larger than ``most_keys`` keys need.

    ``most_keys`` bounds the keys the map will be given (the offsets of the range a pass maps):
    a small log gets a small table. The C table is zeroed lazily (calloc), so even a large one
    costs only the pages its keys reach, and all of it goes back when the map is dropped.
    """
    seed = os.urandom(16)
    if native and _NATIVE is not None:
        slots = max(4, budget_bytes // SLOT_BYTES)
        if most_keys is not None:
            slots = min(slots, max(4, most_keys * 10 // 9 + 2))
        built: KeyMapLike = _NATIVE(slots, seed)
        return built
    entries = max(1, budget_bytes // DICT_ENTRY_BYTES)
    return DigestDictMap(entries if most_keys is None else min(entries, max(1, most_keys)), seed)


def keys_within(budget_bytes: int, *, native: bool = NATIVE) -> int:
    """How many keys a map of ``budget_bytes`` takes (what the C map's ``max_entries`` will be)."""
    if native and _NATIVE is not None:
        slots = max(4, budget_bytes // SLOT_BYTES)
        return min(slots * 9 // 10, slots - 1)
    return max(1, budget_bytes // DICT_ENTRY_BYTES)
