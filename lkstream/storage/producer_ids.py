"""Producer ids for idempotent producers: allocated from a persisted counter, never reused.

``{persist_dir}/producer_ids`` (big-endian, 12 bytes, written with
:func:`~lkstream.storage.files.atomic_write`)::

    offset  size  field
    0       8     every id below this may have been handed out
    8       4     CRC-32C of the first 8 bytes

Ids are handed out in blocks of :data:`BLOCK_SIZE`: before the first id of a
block is given, the block's end is persisted. After a crash the allocator
starts at the persisted end, so an id is never given twice (at most a block's
worth of ids is skipped). A damaged file fails the open loudly: guessing could
reuse ids and let a new producer's batches pass as an old producer's duplicates.

Thread-safe.
"""

from __future__ import annotations

import os
import struct
import threading
from typing import Final

import crc32c

from lkstream.errors import CorruptRecordError, map_os_errors
from lkstream.storage.files import atomic_write

FILE_NAME: Final = "producer_ids"
BLOCK_SIZE: Final = 1000
_RECORD: Final = struct.Struct(">qI")


class ProducerIdAllocator:
    """Hands out producer ids that are unique across restarts of one data directory."""

    def __init__(self, persist_dir: str, block_size: int = BLOCK_SIZE) -> None:
        self.path = os.path.join(persist_dir, FILE_NAME)
        self._block_size = block_size
        self._lock = threading.Lock()
        self._next = self._load()
        self._block_end = self._next  # nothing of the next block is persisted yet

    def _load(self) -> int:
        if not os.path.exists(self.path):
            return 0
        with map_os_errors("read", self.path), open(self.path, "rb") as f:
            data = f.read()
        if len(data) != _RECORD.size:
            raise CorruptRecordError(f"{len(data)} bytes, expected {_RECORD.size}", path=self.path)
        end, crc = _RECORD.unpack(data)
        if crc != crc32c.crc32c(data[:8]) or end < 0:
            raise CorruptRecordError("CRC-32C mismatch or negative counter", path=self.path)
        return int(end)

    def allocate(self) -> int:
        """A producer id no one got before from this data directory."""
        with self._lock:
            if self._next >= self._block_end:
                end = self._next + self._block_size
                head = struct.pack(">q", end)
                atomic_write(self.path, head + struct.pack(">I", crc32c.crc32c(head)))
                self._block_end = end
            allocated = self._next
            self._next += 1
            return allocated
