"""lkstream.storage.checkpoint: the 42-byte checkpoint.meta of a partition."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c
import pytest

from lkstream.storage.checkpoint import (
    CHECKPOINT_NAME,
    CHECKPOINT_SIZE,
    Checkpoint,
    CheckpointDamaged,
    read_checkpoint,
    write_checkpoint,
)

SAMPLE = Checkpoint(last_sealed_base=100, active_base=250, recovery_point=4096, next_offset=300)


def test_encoding_is_42_bytes_with_the_documented_layout() -> None:
    raw = SAMPLE.encode()
    assert CHECKPOINT_SIZE == len(raw) == 42
    assert raw[:4] == b"LKCP"
    assert struct.unpack_from(">Hqqqq", raw, 4) == (1, 100, 250, 4096, 300)
    assert struct.unpack_from(">I", raw, 38)[0] == crc32c.crc32c(raw[:38])


def test_decode_round_trips() -> None:
    assert Checkpoint.decode(SAMPLE.encode()) == SAMPLE
    none_sealed = Checkpoint(-1, 0, 0, 0)
    assert Checkpoint.decode(none_sealed.encode()) == none_sealed


@pytest.mark.parametrize("size", [0, 41, 43])
def test_decode_rejects_wrong_size(size: int) -> None:
    raw = (SAMPLE.encode() + b"\x00")[:size] if size <= 43 else b""
    with pytest.raises(CheckpointDamaged, match="size"):
        Checkpoint.decode(raw)


def test_decode_rejects_crc_mismatch() -> None:
    raw = bytearray(SAMPLE.encode())
    raw[20] ^= 1
    with pytest.raises(CheckpointDamaged, match="CRC"):
        Checkpoint.decode(bytes(raw))


def _resealed(body: bytes) -> bytes:
    return body + struct.pack(">I", crc32c.crc32c(body))


def test_decode_rejects_wrong_magic_even_with_valid_crc() -> None:
    body = b"XXXX" + SAMPLE.encode()[4:38]
    with pytest.raises(CheckpointDamaged, match="magic"):
        Checkpoint.decode(_resealed(body))


def test_decode_rejects_unknown_version() -> None:
    body = bytearray(SAMPLE.encode()[:38])
    struct.pack_into(">H", body, 4, 2)
    with pytest.raises(CheckpointDamaged, match="version 2"):
        Checkpoint.decode(_resealed(bytes(body)))


@pytest.mark.parametrize(
    "fields",
    [(-1, -5, 0, 0), (-1, 0, -1, 0), (-1, 10, 0, 9)],
    ids=["negative-active", "negative-point", "next-below-active"],
)
def test_decode_rejects_fields_out_of_range(fields: tuple[int, int, int, int]) -> None:
    body = struct.pack(">4sHqqqq", b"LKCP", 1, *fields)
    with pytest.raises(CheckpointDamaged, match="out of range"):
        Checkpoint.decode(_resealed(body))


def test_read_checkpoint_of_a_directory_without_one_is_none(tmp_path: Path) -> None:
    assert read_checkpoint(str(tmp_path)) is None


def test_write_then_read_checkpoint(tmp_path: Path) -> None:
    write_checkpoint(str(tmp_path), SAMPLE)
    assert read_checkpoint(str(tmp_path)) == SAMPLE
    assert os.listdir(tmp_path) == [CHECKPOINT_NAME]  # no tmp file left behind


def test_write_checkpoint_replaces_the_previous_one(tmp_path: Path) -> None:
    write_checkpoint(str(tmp_path), SAMPLE)
    newer = Checkpoint(250, 400, 10, 410)
    write_checkpoint(str(tmp_path), newer)
    assert read_checkpoint(str(tmp_path)) == newer


def test_read_checkpoint_rejects_a_file_with_trailing_bytes(tmp_path: Path) -> None:
    (tmp_path / CHECKPOINT_NAME).write_bytes(SAMPLE.encode() + b"\x00")
    with pytest.raises(CheckpointDamaged, match="size 43"):
        read_checkpoint(str(tmp_path))


def test_read_checkpoint_rejects_a_torn_file(tmp_path: Path) -> None:
    (tmp_path / CHECKPOINT_NAME).write_bytes(SAMPLE.encode()[:20])
    with pytest.raises(CheckpointDamaged):
        read_checkpoint(str(tmp_path))
