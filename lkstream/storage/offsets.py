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

from lkstream.errors import CorruptRecordError, InvalidArgumentError, map_os_errors
from lkstream.storage.clock import Clock, SystemClock
from lkstream.storage.files import atomic_write
from lkstream.storage.names import validate_group, validate_topic

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
        """Remove every group's committed offsets of ``topic`` (it was deleted); return how many.

        Unambiguous because group ids contain no ``__`` and do not end with ``_``:
        the first ``__`` of a file name ends the group id.
        """
        validate_topic(topic)
        removed = 0
        with self._lock:
            for name in os.listdir(self.directory):
                group, sep, rest = name.partition("__")
                if sep and group and rest.startswith(topic + "__part") and rest.endswith(SUFFIX):
                    pid = rest[len(topic) + len("__part") : -len(SUFFIX)]
                    if pid.isdigit():
                        os.remove(os.path.join(self.directory, name))
                        removed += 1
        return removed

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
