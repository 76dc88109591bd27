"""``checkpoint.meta``: where recovery of a partition may start trusting the log.

Layout (42 bytes, big-endian), written only through :func:`atomic_write`::

    offset size type    field              meaning
    ------ ---- ------- ------------------ ---------------------------------------------
         0    4 bytes   magic              b"LKCP"
         4    2 uint16  version            1
         6    8 int64   last_sealed_base   base offset of the newest sealed segment, -1 if none
        14    8 int64   active_base        base offset of the active segment
        22    8 int64   recovery_point     bytes of the active segment known fsynced and valid
        30    8 int64   next_offset        offset of the batch that starts at recovery_point
        38    4 uint32  crc                CRC-32C of bytes [0, 38)

It is written on rotation, on close, and at most once per
``checkpoint_interval_ms`` after a group-commit fsync. Recovery validates the
active segment only from ``recovery_point``; a missing, torn or stale
checkpoint (CRC mismatch, wrong magic, ``active_base`` not the last segment,
``recovery_point`` beyond the file) is reported and the whole active segment is
validated instead. Sealed segments are never re-validated on open: each was
fsynced whole before its successor was created.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Final

import crc32c

from lkstream.errors import map_os_errors
from lkstream.storage.files import atomic_write

CHECKPOINT_NAME: Final = "checkpoint.meta"
_MAGIC: Final = b"LKCP"
_VERSION: Final = 1
_BODY: Final = struct.Struct(">4sHqqqq")
_CRC: Final = struct.Struct(">I")
CHECKPOINT_SIZE: Final = _BODY.size + _CRC.size
assert CHECKPOINT_SIZE == 42


class CheckpointDamaged(Exception):
    """The checkpoint file exists but cannot be trusted."""


@dataclass(frozen=True)
class Checkpoint:
    last_sealed_base: int
    active_base: int
    recovery_point: int
    next_offset: int

    def encode(self) -> bytes:
        body = _BODY.pack(
            _MAGIC, _VERSION, self.last_sealed_base, self.active_base, self.recovery_point, self.next_offset
        )
        return body + _CRC.pack(crc32c.crc32c(body))

    @classmethod
    def decode(cls, raw: bytes) -> Checkpoint:
        if len(raw) != CHECKPOINT_SIZE:
            raise CheckpointDamaged(f"size {len(raw)}, expected {CHECKPOINT_SIZE}")
        body, (crc,) = raw[: _BODY.size], _CRC.unpack_from(raw, _BODY.size)
        if crc32c.crc32c(body) != crc:
            raise CheckpointDamaged("CRC-32C mismatch")
        magic, version, sealed, active, point, next_offset = _BODY.unpack(body)
        if magic != _MAGIC or version != _VERSION:
            raise CheckpointDamaged(f"magic {magic!r} version {version}")
        if point < 0 or active < 0 or next_offset < active:
            raise CheckpointDamaged("fields out of range")
        return cls(sealed, active, point, next_offset)


def read_checkpoint(directory: str) -> Checkpoint | None:
    """The partition's checkpoint, ``None`` if absent; :class:`CheckpointDamaged` if unusable."""
    path = os.path.join(directory, CHECKPOINT_NAME)
    try:
        with open(path, "rb") as f:
            raw = f.read(CHECKPOINT_SIZE + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointDamaged(f"unreadable: {exc}") from exc
    return Checkpoint.decode(raw)


def write_checkpoint(directory: str, checkpoint: Checkpoint) -> None:
    path = os.path.join(directory, CHECKPOINT_NAME)
    with map_os_errors("write checkpoint", path):
        atomic_write(path, checkpoint.encode())
