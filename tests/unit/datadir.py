"""Data-directory helpers shared by the reader, verify and CLI tests (plain functions, no fixtures)."""

from __future__ import annotations

import os

from lkstream import Broker
from lkstream.storage.reader import ScannedBatch, open_read_only, scan_segment

SEGMENT_BYTES = 4096
VALUE = b"v" * 300  # three records make a ~1 KB batch: four batches per 4 KiB segment


def build(data_dir: str, batches: int = 10, topic: str = "t", partitions: int = 1) -> list[int]:
    """Produce ``batches`` batches of three records into partition 0; return every offset written."""
    offsets: list[int] = []
    with Broker(
        persist_dir=data_dir, segment_max_bytes=SEGMENT_BYTES, index_interval_bytes=0, partitions=partitions
    ) as broker:
        for n in range(batches):
            records = [(f"k{n}-{i}".encode(), VALUE) for i in range(3)]
            offsets += [o for _, o in broker.produce_many_sync(topic, records, partition=0)]
    return offsets


def part_dir(data_dir: str, topic: str = "t", pid: int = 0) -> str:
    """The directory of partition ``pid`` of ``topic`` under ``data_dir``."""
    return os.path.join(data_dir, "topics", topic, f"part{pid}")


def segment_paths(data_dir: str, topic: str = "t", pid: int = 0) -> list[str]:
    """The partition's ``.seg`` files, sorted (oldest first)."""
    d = part_dir(data_dir, topic, pid)
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".seg"))


def batch_positions(path: str) -> list[int]:
    """The byte position of every valid batch that scan_segment finds in the segment at ``path``."""
    file = open_read_only(path)
    try:
        return [item.position for item in scan_segment(file) if isinstance(item, ScannedBatch)]
    finally:
        file.close()


def flip_byte(path: str, position: int) -> None:
    """Invert every bit of the byte at ``position`` in the file at ``path``."""
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0xFF]))
