"""``marks.meta``: the two offsets of a partition that are not segment boundaries (issue 24).

Layout (34 bytes, big-endian), written only through :func:`~lkstream.storage.files.atomic_write`::

    offset size type    field              meaning
    ------ ---- ------- ------------------ ---------------------------------------------------
         0    4 bytes   magic              b"LKMK"
         4    2 uint16  version            1
         6    8 int64   log_start_offset   reads below it are out of range (DeleteRecords)
        14    8 int64   clean_end          the cleaner has cleaned every offset below it
        22    8 int64   tombstones_due_ms  when the oldest tombstone the cleaner kept may go (-1: none)
        30    4 uint32  crc                CRC-32C of bytes [0, 30)

``log_start_offset`` is Kafka's log start offset as DeleteRecords moves it: it may
lie inside a segment, or inside a batch (a read from it returns that batch, and the
reader skips the records below). Whole segments below it are deleted; the rest of
the segment that holds it stays. It only moves forward. ``clean_end`` is where the
cleaner's next pass starts (Kafka's cleaner offset checkpoint): 0 means nothing was
cleaned yet. ``tombstones_due_ms`` lets the broker run a pass over a partition that got
no new data once its tombstones may be removed. The offsets default to 0 and the time
to -1 when the file is missing.

Written when DeleteRecords moves the log start and after each cleaner pass (three
fsyncs: file, rename, directory; neither is on the produce path). A damaged file is
reported and read as missing: the log start falls back to the first segment's base
(records DeleteRecords removed logically become readable again until the next
DeleteRecords, which a caller repeats) and the cleaner starts over from the log
start (it cleans more, loses nothing).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Final

import crc32c

from lkstream.errors import map_os_errors
from lkstream.storage.files import atomic_write

MARKS_NAME: Final = "marks.meta"
_MAGIC: Final = b"LKMK"
_VERSION: Final = 1
_BODY: Final = struct.Struct(">4sHqqq")
_CRC: Final = struct.Struct(">I")
MARKS_SIZE: Final = _BODY.size + _CRC.size
assert MARKS_SIZE == 34


class MarksDamaged(Exception):
    """``marks.meta`` exists but cannot be trusted."""


@dataclass(frozen=True)
class Marks:
    log_start_offset: int = 0
    clean_end: int = 0
    tombstones_due_ms: int = -1

    def encode(self) -> bytes:
        body = _BODY.pack(_MAGIC, _VERSION, self.log_start_offset, self.clean_end, self.tombstones_due_ms)
        return body + _CRC.pack(crc32c.crc32c(body))

    @classmethod
    def decode(cls, raw: bytes) -> Marks:
        if len(raw) != MARKS_SIZE:
            raise MarksDamaged(f"size {len(raw)}, expected {MARKS_SIZE}")
        body, (crc,) = raw[: _BODY.size], _CRC.unpack_from(raw, _BODY.size)
        if crc32c.crc32c(body) != crc:
            raise MarksDamaged("CRC-32C mismatch")
        magic, version, start, clean_end, tombstones_due_ms = _BODY.unpack(body)
        if magic != _MAGIC or version != _VERSION:
            raise MarksDamaged(f"magic {magic!r} version {version}")
        if start < 0 or clean_end < 0 or tombstones_due_ms < -1:
            raise MarksDamaged("fields out of range")
        return cls(start, clean_end, tombstones_due_ms)


def read_marks(directory: str) -> Marks | None:
    """The partition's marks, ``None`` if absent; :class:`MarksDamaged` if unusable."""
    path = os.path.join(directory, MARKS_NAME)
    try:
        with open(path, "rb") as f:
            raw = f.read(MARKS_SIZE + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MarksDamaged(f"unreadable: {exc}") from exc
    return Marks.decode(raw)


def write_marks(directory: str, marks: Marks) -> None:
    path = os.path.join(directory, MARKS_NAME)
    with map_os_errors("write marks", path):
        atomic_write(path, marks.encode())
