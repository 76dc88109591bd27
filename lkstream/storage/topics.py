"""Topic directories: ``topics/{topic}/topic.json`` plus one ``part{pid}/`` per partition.

``topic.json`` (written atomically) holds the topic's own settings and its id::

    {"partitions": 3, "retention_ms": -1, "retention_bytes": -1, "topic_id": "<32 hex digits>"}

``topic_id`` (a UUID, since issue 12) names this incarnation of the topic: it is
written with the topic, in the same rename that makes the topic exist, and a
topic deleted and created again under the same name gets a new one. Committed
offsets carry it (:mod:`lkstream.storage.offsets`), and Kafka clients see it in
Metadata v10+ and Fetch v13+. A ``topic.json`` written before it existed gets one
the first time the topic is opened.

A topic directory without ``topic.json`` (restored from a backup of segments
only) is adopted: its partition count is the number of ``part{pid}``
directories and its retention falls back to the broker defaults.

Deleting a topic first renames its directory into ``trash/`` (one atomic
rename, so a crash never leaves half a topic visible), then removes it; the
next open empties ``trash/``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
import uuid
from dataclasses import asdict, dataclass

from lkstream.errors import InvalidArgumentError, StorageError, TopicExistsError, UnknownTopicError, map_os_errors
from lkstream.storage.files import atomic_write, fsync_dir
from lkstream.storage.names import parse_partition_dir, partition_dir_name, validate_topic
from lkstream.storage.pacing import Pacer

log = logging.getLogger("lkstream.storage")

TOPICS_DIR = "topics"
TRASH_DIR = "trash"
TOPIC_META = "topic.json"
MAX_PARTITIONS = 10_000


@dataclass(frozen=True)
class TopicSettings:
    partitions: int
    retention_ms: int = -1
    retention_bytes: int = -1

    def __post_init__(self) -> None:
        if not isinstance(self.partitions, int) or not 1 <= self.partitions <= MAX_PARTITIONS:
            raise InvalidArgumentError(f"partitions must be an integer in 1..{MAX_PARTITIONS}, got {self.partitions!r}")
        for name in ("retention_ms", "retention_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < -1:
                raise InvalidArgumentError(f"{name} must be -1 (unlimited) or a non-negative integer, got {value!r}")


class TopicStore:
    """Creates, finds and deletes topic directories under ``persist_dir``.

    Not thread-safe: the broker serialises topic administration under its lock.
    """

    def __init__(self, persist_dir: str) -> None:
        self.root = os.path.join(persist_dir, TOPICS_DIR)
        self.trash = os.path.join(persist_dir, TRASH_DIR)
        with map_os_errors("create topics directory", self.root):
            os.makedirs(self.root, exist_ok=True)
            os.makedirs(self.trash, exist_ok=True)
        self._empty_trash()

    def topic_dir(self, topic: str) -> str:
        return os.path.join(self.root, validate_topic(topic))

    def partition_dir(self, topic: str, partition: int) -> str:
        return os.path.join(self.topic_dir(topic), partition_dir_name(partition))

    def list(self) -> list[str]:
        return sorted(name for name in os.listdir(self.root) if os.path.isdir(os.path.join(self.root, name)))

    def load(self, topic: str, defaults: TopicSettings) -> tuple[TopicSettings, uuid.UUID]:
        """The topic's settings and id (an id is made and written if ``topic.json`` has none)."""
        directory = self.topic_dir(topic)
        meta = os.path.join(directory, TOPIC_META)
        try:
            with open(meta, "rb") as f:
                raw = json.loads(f.read())
            settings = TopicSettings(
                partitions=raw["partitions"],
                retention_ms=raw.get("retention_ms", defaults.retention_ms),
                retention_bytes=raw.get("retention_bytes", defaults.retention_bytes),
            )
            topic_id = _parse_id(raw.get("topic_id"))
            if topic_id is None:  # written before topic ids existed
                topic_id = uuid.uuid4()
                self._write_meta(topic, settings, topic_id)
            return settings, topic_id
        except FileNotFoundError:
            if not os.path.isdir(directory):
                raise UnknownTopicError(topic) from None
        except (ValueError, KeyError, TypeError, InvalidArgumentError) as exc:
            log.warning("%s is unreadable (%s); adopting the topic from its directories", meta, exc)
        pids = [p for n in os.listdir(directory) if (p := parse_partition_dir(n)) is not None]
        count = max(pids, default=-1) + 1
        if count == 0:
            raise UnknownTopicError(topic)
        settings = TopicSettings(count, defaults.retention_ms, defaults.retention_bytes)
        topic_id = uuid.uuid4()
        self._write_meta(topic, settings, topic_id)
        return settings, topic_id

    def create(self, topic: str, settings: TopicSettings) -> uuid.UUID:
        """Create the topic's directories and ``topic.json`` in one rename; return its new id."""
        directory = self.topic_dir(topic)
        if os.path.exists(directory):
            raise TopicExistsError(topic)
        # Built in trash/ and renamed into topics/ in one step: a crash mid-way must not leave
        # a topic without topic.json or with missing partition directories (the next open
        # would adopt it with too few partitions, or fail). trash/ is emptied on open.
        staging = os.path.join(self.trash, f"new-{uuid.uuid4().hex}")
        try:
            pacer = Pacer()  # beside the daemon's event loop: see empty()
            with map_os_errors("create topic", directory):
                os.makedirs(staging)
                for pid in range(settings.partitions):
                    os.mkdir(os.path.join(staging, partition_dir_name(pid)))
                    pacer.step()
            topic_id = uuid.uuid4()
            atomic_write(os.path.join(staging, TOPIC_META), _meta_json(settings, topic_id))
            with map_os_errors("create topic", directory):
                os.rename(staging, directory)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)  # a failed create leaves nothing, not even in trash/
            raise
        try:
            fsync_dir(self.root)
        except StorageError as exc:  # the rename is done: the topic exists (a power loss may undo it)
            log.warning("could not fsync %s after creating %r: %s", self.root, topic, exc)
        return topic_id

    def update(self, topic: str, settings: TopicSettings, topic_id: uuid.UUID) -> None:
        self._write_meta(topic, settings, topic_id)

    def _write_meta(self, topic: str, settings: TopicSettings, topic_id: uuid.UUID) -> None:
        atomic_write(os.path.join(self.topic_dir(topic), TOPIC_META), _meta_json(settings, topic_id))

    def delete(self, topic: str) -> None:
        """Move the topic into the trash atomically, then remove it."""
        self.empty(self.move_to_trash(topic))

    def move_to_trash(self, topic: str) -> str:
        """Take the topic out of ``topics/`` in one durable rename; return where it went.

        The commit point of a delete: if it raises, the topic is untouched.
        """
        directory = self.topic_dir(topic)
        if not os.path.isdir(directory):
            raise UnknownTopicError(topic)
        doomed = os.path.join(self.trash, f"{topic}-{uuid.uuid4().hex}")
        with map_os_errors("delete topic", directory):
            os.rename(directory, doomed)
        try:
            fsync_dir(self.root)
        except StorageError as exc:  # the rename is done: the delete stands (a power loss may undo it)
            log.warning("could not fsync %s after deleting %r: %s", self.root, topic, exc)
        return doomed

    def empty(self, trashed: str, stop: threading.Event | None = None) -> None:
        r"""Remove a trashed directory, one entry (partition) at a time, paced; what is left
        (an I/O error, or ``stop`` set by a closing broker) goes at the next open.

        Paced (:class:`~lkstream.storage.pacing.Pacer`) because it runs beside the daemon's
        event loop: thousands of quick ``rmdir``\ s in a row keep the GIL from it (finding 9).
        """
        pacer = Pacer()
        try:
            with os.scandir(trashed) as entries:
                children = [(entry.path, entry.is_dir(follow_symlinks=False)) for entry in entries]
        except OSError:
            children = []
        for path, is_dir in children:
            if stop is not None and stop.is_set():
                return
            if is_dir:
                try:
                    os.rmdir(path)  # most partitions of a topic were never written: one call
                except OSError:
                    shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.remove(path)
            pacer.step()
        shutil.rmtree(trashed, ignore_errors=True)

    def _empty_trash(self) -> None:
        with map_os_errors("empty the trash", self.trash):
            names = os.listdir(self.trash)
        for name in names:
            shutil.rmtree(os.path.join(self.trash, name), ignore_errors=True)


def _meta_json(settings: TopicSettings, topic_id: uuid.UUID) -> bytes:
    return json.dumps({**asdict(settings), "topic_id": topic_id.hex}).encode()


def _parse_id(raw: object) -> uuid.UUID | None:
    """A stored topic id (32 hex digits), or None when missing or not one."""
    if not isinstance(raw, str) or len(raw) != 32:
        return None
    try:
        return uuid.UUID(hex=raw)
    except ValueError:
        return None
