"""Committed consumer offsets: ``offsets/{group}__{topic}__part{pid}.offset``.

Each file holds one line of JSON, ``{"offset": N, "committed_ms": T}``, where N
is the next offset the group will read (Kafka's convention). Files are replaced
only through :func:`~lkstream.storage.files.atomic_write` (tmp, fsync, rename,
directory fsync), so after any crash a file holds a whole old or a whole new
commit. Group ids may not contain ``__`` (see :mod:`lkstream.storage.names`),
which keeps file names unambiguous.
"""

from __future__ import annotations

import json
import os
import threading

from lkstream.errors import CorruptRecordError, InvalidArgumentError, LkstreamError, map_os_errors
from lkstream.storage.clock import Clock, SystemClock
from lkstream.storage.files import atomic_write
from lkstream.storage.names import parse_partition_dir, validate_group, validate_topic

OFFSETS_DIR = "offsets"
SUFFIX = ".offset"


class OffsetStore:
    """Durable committed offsets under ``base_dir/offsets``. Thread-safe.

    ``base_dir`` is the broker's ``persist_dir`` (or any directory the
    application owns when it keeps offsets itself).
    """

    def __init__(self, base_dir: str, *, clock: Clock | None = None, sweep_tmp: bool = False) -> None:
        self.directory = os.path.join(base_dir, OFFSETS_DIR)
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        with map_os_errors("create offsets directory", self.directory):
            os.makedirs(self.directory, exist_ok=True)
            # Only the broker that owns the data directory sweeps: another store on the
            # same directory may be between its write and its rename right now.
            if sweep_tmp:
                for name in os.listdir(self.directory):
                    if name.endswith(".tmp"):
                        os.remove(os.path.join(self.directory, name))

    def path_for(self, group: str, topic: str, partition: int) -> str:
        validate_group(group)
        validate_topic(topic)
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise InvalidArgumentError(f"invalid partition {partition!r}")
        return os.path.join(self.directory, f"{group}__{topic}__part{partition}{SUFFIX}")

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Durably record that ``group`` will next read ``offset`` of ``topic[partition]``."""
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidArgumentError(f"invalid offset {offset!r}: must be a non-negative integer")
        path = self.path_for(group, topic, partition)
        body = json.dumps({"offset": offset, "committed_ms": self._clock.now_ms()}).encode() + b"\n"
        with self._lock:
            atomic_write(path, body)

    def forget_topic(self, topic: str) -> int:
        """Remove every group's committed offsets of ``topic`` (it was deleted); return how many."""
        validate_topic(topic)
        removed = 0
        with self._lock:
            for name in os.listdir(self.directory):
                parsed = parse_offset_file_name(name)
                if parsed is not None and parsed[1] == topic:
                    os.remove(os.path.join(self.directory, name))
                    removed += 1
        return removed

    def list_committed(self) -> dict[tuple[str, str, int], int]:
        """Every readable commit as ``{(group, topic, partition): offset}``.

        Unreadable files are skipped here; ``lkstream verify`` reports them.
        """
        found: dict[tuple[str, str, int], int] = {}
        try:
            names = os.listdir(self.directory)
        except OSError:
            return found
        for name in names:
            parsed = parse_offset_file_name(name)
            if parsed is None:
                continue
            try:
                offset = self.read_committed(*parsed)
            except (LkstreamError, OSError):
                continue
            if offset is not None:
                found[parsed] = offset
        return found

    def read_committed(self, group: str, topic: str, partition: int) -> int | None:
        """The committed offset, or ``None`` if the group never committed this partition."""
        path = self.path_for(group, topic, partition)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        try:
            offset = json.loads(raw)["offset"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptRecordError(f"unreadable committed offset ({exc})", path=path) from exc
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise CorruptRecordError(f"committed offset {offset!r} is not a non-negative integer", path=path)
        return offset


def parse_offset_file_name(name: str) -> tuple[str, str, int] | None:
    """``"g__orders__part3.offset"`` -> ``("g", "orders", 3)``; None for any other name.

    Unambiguous because group ids contain no ``__`` and do not end with ``_``:
    the first ``__`` ends the group id, the last ``__`` starts the partition.
    Names that no valid (group, topic, partition) would produce are rejected.
    """
    if not name.endswith(SUFFIX):
        return None
    group, _, rest = name[: -len(SUFFIX)].partition("__")
    topic, _, part = rest.rpartition("__")
    pid = parse_partition_dir(part)
    try:
        validate_group(group)
        validate_topic(topic)
    except InvalidArgumentError:
        return None
    return None if pid is None else (group, topic, pid)
