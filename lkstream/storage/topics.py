"""Topic directories: ``topics/{topic}/topic.json`` plus one ``part{pid}/`` per partition.

``topic.json`` (written atomically) holds the topic's partition count, its id and its config
overrides (Kafka's names and canonical string values, :mod:`lkstream.storage.topic_config`)::

    {"partitions": 3, "topic_id": "<32 hex digits>", "configs": {"cleanup.policy": "compact"}}

A ``topic.json`` written before configs existed (issue 24) has ``retention_ms`` and
``retention_bytes`` instead, always written, whether or not they were chosen for the topic: each
becomes an override (``retention.ms``, ``retention.bytes``) when it differs from the broker's
default at load, so the topic keeps the retention it had; the file is rewritten in the new form.

``topic_id`` (a UUID, since issue 12) names this incarnation of the topic: it is
written with the topic, in the same rename that makes the topic exist, and a
topic deleted and created again under the same name gets a new one. Committed
offsets carry it (:mod:`lkstream.storage.offsets`), and Kafka clients see it in
Metadata v10+ and Fetch v13+. A ``topic.json`` written before it existed gets one
the first time the topic is opened.

A topic directory without ``topic.json`` (restored from a backup of segments
only) is adopted: its partition count is the number of ``part{pid}``
directories and it has no config overrides (the broker's defaults apply). A ``topic.json``
whose configs this version cannot honour stops the open with a
:class:`~lkstream.errors.StorageError` naming the file: dropping them (say ``cleanup.policy=compact``)
would let retention delete what the topic was configured to keep.

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
from dataclasses import dataclass

from lkstream.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    StorageError,
    TopicExistsError,
    UnknownTopicError,
    map_os_errors,
)
from lkstream.storage.files import atomic_write, fsync_dir
from lkstream.storage.names import parse_partition_dir, partition_dir_name, validate_topic
from lkstream.storage.pacing import Pacer
from lkstream.storage.topic_config import NO_OVERRIDES, TopicConfig

log = logging.getLogger("lkstream.storage")

TOPICS_DIR = "topics"
TRASH_DIR = "trash"
TOPIC_META = "topic.json"
MAX_PARTITIONS = 10_000


@dataclass(frozen=True)
class TopicSettings:
    """A topic's partition count and the retention that applies to it (the effective values).

    What :class:`~lkstream.broker.topics.TopicDescription` and the remote client report; the
    overrides themselves are a :class:`~lkstream.storage.topic_config.TopicConfig`.
    """

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


@dataclass(frozen=True)
class StoredTopic:
    """What ``topic.json`` holds: the partition count, the id of this incarnation, the config overrides."""

    partitions: int
    topic_id: uuid.UUID
    configs: TopicConfig = NO_OVERRIDES


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

    def load(self, topic: str, defaults: TopicSettings) -> StoredTopic:
        """The topic's partition count, id and configs (an id is made and written if ``topic.json`` has none).

        ``defaults`` carries the broker's retention defaults, which decide whether the retention of a
        ``topic.json`` from before configs existed becomes an override (see the module docstring).
        """
        directory = self.topic_dir(topic)
        meta = os.path.join(directory, TOPIC_META)
        try:
            with open(meta, "rb") as f:
                raw = json.loads(f.read())
            partitions = raw["partitions"]
            TopicSettings(partitions)  # validates the count
            configs, legacy = _stored_configs(raw, defaults, meta)
            topic_id = _parse_id(raw.get("topic_id"))
            stored = StoredTopic(partitions, topic_id or uuid.uuid4(), configs)
            if topic_id is None or legacy:  # written before topic ids, or before configs, existed
                self.update(topic, stored)
            return stored
        except FileNotFoundError:
            if not os.path.isdir(directory):
                raise UnknownTopicError(topic) from None
        except (ValueError, KeyError, TypeError, InvalidArgumentError) as exc:
            log.warning("%s is unreadable (%s); adopting the topic from its directories", meta, exc)
        pids = [p for n in os.listdir(directory) if (p := parse_partition_dir(n)) is not None]
        count = max(pids, default=-1) + 1
        if count == 0:
            raise UnknownTopicError(topic)
        stored = StoredTopic(count, uuid.uuid4())
        self.update(topic, stored)
        return stored

    def create(self, topic: str, partitions: int, configs: TopicConfig | None = None) -> uuid.UUID:
        """Create the topic's directories and ``topic.json`` in one rename; return its new id."""
        TopicSettings(partitions)  # validates the count
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
                for pid in range(partitions):
                    os.mkdir(os.path.join(staging, partition_dir_name(pid)))
                    pacer.step()
            topic_id = uuid.uuid4()
            stored = StoredTopic(partitions, topic_id, configs or TopicConfig())
            atomic_write(os.path.join(staging, TOPIC_META), _meta_json(stored))
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

    def update(self, topic: str, stored: StoredTopic) -> None:
        """Replace ``topic.json`` atomically (a crash leaves the old one or the new one)."""
        atomic_write(os.path.join(self.topic_dir(topic), TOPIC_META), _meta_json(stored))

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


def _meta_json(stored: StoredTopic) -> bytes:
    return json.dumps(
        {"partitions": stored.partitions, "topic_id": stored.topic_id.hex, "configs": stored.configs.to_json()}
    ).encode()


def _stored_configs(raw: dict[str, object], defaults: TopicSettings, meta: str) -> tuple[TopicConfig, bool]:
    """The overrides a ``topic.json`` holds, and whether it is of the form before configs existed."""
    if "configs" in raw:
        try:
            return TopicConfig.from_json(raw["configs"]), False
        except InvalidConfigError as exc:
            why = f"the topic configs in it cannot be honoured ({exc}); fix or restore it"
            raise StorageError(why, path=meta) from exc
    legacy = {}
    for field, name in (("retention_ms", "retention.ms"), ("retention_bytes", "retention.bytes")):
        value = raw.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value != getattr(defaults, field):
            legacy[name] = str(value)
    return TopicConfig.parse(legacy), True


def _parse_id(raw: object) -> uuid.UUID | None:
    """A stored topic id (32 hex digits), or None when missing or not one."""
    if not isinstance(raw, str) or len(raw) != 32:
        return None
    try:
        return uuid.UUID(hex=raw)
    except ValueError:
        return None
