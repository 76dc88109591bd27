"""Committed consumer offsets: a journal with group commit over ``{group}__{topic}__part{pid}.offset`` files.

Each ``.offset`` file holds one line of JSON, ``{"offset": N, "committed_ms": T}``,
where N is the next offset the group will read (Kafka's convention), and the commit's
metadata string when it had one. Group ids that the readable name cannot carry get a
hashed file name (:mod:`lkstream.storage.offset_files`). Commits
are appended to ``offsets/commits.log`` (:mod:`lkstream.storage.offset_journal`),
and concurrent committers share one fsync; the ``.offset`` files are the
compacted snapshot, rewritten with tmp + fsync + rename + directory fsync when
the journal passes ``compact_bytes`` and on :meth:`OffsetStore.close`. The
state is the files with the journal replayed over them; a commit is durable
when :meth:`~OffsetStore.commit` returns (or ``on_durable(None)`` runs for
:meth:`~OffsetStore.submit`), and the entries of one commit are applied
together or not at all.

One process writes a directory (an ``flock`` on ``offsets/``); every store of
that process shares the writer, so reads are dictionary lookups. A store in
another process, or one opened ``read_only=True`` with no writer in this
process, is a read-only view that follows the journal on every read.
This module does not check that offsets move forward: that is the coordinator's job.

Incarnations (issue 12, finding 6): a commit may carry the topic's id
(``topic_id``, from ``topic.json``), stored with the offset. Reads given the
current id ignore offsets of another incarnation, so a topic deleted and created
again under the same name never inherits its predecessor's offsets, even when a
crash cut the delete short before the old offsets were forgotten;
:meth:`OffsetStore.reconcile`, run by the broker at open, then removes them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Mapping

from lkstream.errors import CorruptRecordError, DataDirLockedError, InvalidArgumentError, map_os_errors
from lkstream.storage.clock import Clock, SystemClock
from lkstream.storage.names import validate_group, validate_topic
from lkstream.storage.offset_files import SUFFIX, Committed, Key, Value, offset_file_name, parse_offset_file_name
from lkstream.storage.offset_journal import (
    DEFAULT_COMPACT_BYTES,
    JOURNAL_NAME,
    DurableCallback,
    Entry,
    FileFactory,
    Journal,
    JournalFollower,
)

__all__ = [
    "JOURNAL_NAME",
    "OFFSETS_DIR",
    "SUFFIX",
    "Committed",
    "OffsetStore",
    "TopicIds",
    "parse_offset_file_name",
]

OFFSETS_DIR = "offsets"
#: The current incarnation (``topic.json``'s ``topic_id``) of each topic that exists.
TopicIds = Mapping[str, uuid.UUID]
#: Metadata strings of a commit, per partition (missing partitions: no metadata).
Metadata = Mapping[tuple[str, int], str]


class OffsetStore:
    """Durable committed offsets under ``base_dir/offsets``. Thread-safe.

    ``base_dir`` is the broker's ``persist_dir`` (or any directory the
    application owns when it keeps offsets itself). ``read_only`` never creates,
    locks or writes anything. ``compact_bytes`` is the journal size that
    triggers compaction; ``file_factory`` opens the journal file (a test seam,
    :class:`~lkstream.storage.files.OsFile` by default).
    """

    def __init__(
        self,
        base_dir: str,
        *,
        clock: Clock | None = None,
        sweep_tmp: bool = False,
        read_only: bool = False,
        compact_bytes: int = DEFAULT_COMPACT_BYTES,
        file_factory: FileFactory | None = None,
    ) -> None:
        if not isinstance(compact_bytes, int) or compact_bytes <= 0:
            raise InvalidArgumentError(f"invalid compact_bytes {compact_bytes!r}: must be a positive integer")
        self.directory = os.path.join(base_dir, OFFSETS_DIR)
        self.read_only = read_only
        self._clock = clock or SystemClock()
        self._journal: Journal | None = None
        self._follower: JournalFollower | None = None
        self._closed = False
        if not read_only:
            with map_os_errors("create offsets directory", self.directory):
                os.makedirs(self.directory, exist_ok=True)
            # Only the process holding the journal lock sweeps: nobody else writes tmp files here.
            self._journal = Journal.open(
                self.directory, compact_bytes=compact_bytes, file_factory=file_factory, sweep_tmp=sweep_tmp
            )
        elif os.path.isdir(self.directory):
            shared = Journal._registry.get(_dir_ident(self.directory))
            if shared is not None and not shared.closed:
                self._journal = Journal.open(self.directory)  # this process writes it: share the map
        if self._journal is None:
            self._follower = JournalFollower(self.directory)

    @property
    def journal(self) -> Journal | None:
        """The writer this store uses, or None for a read-only view of another process's directory."""
        return self._journal

    def path_for(self, group: str, topic: str, partition: int) -> str:
        """The snapshot file of a key (it lags the journal until the next compaction)."""
        _validate_key(group, topic, partition)
        return os.path.join(self.directory, offset_file_name((group, topic, partition)))

    # -- writing -----------------------------------------------------------------------------------

    def commit(self, group: str, topic: str, partition: int, offset: int, *, topic_id: uuid.UUID | None = None) -> None:
        """Durably record that ``group`` will next read ``offset`` of ``topic[partition]``.

        ``topic_id`` ties the offset to one incarnation of the topic (see the module docstring).
        """
        self.commit_many(group, {(topic, partition): offset}, topic_ids=None if topic_id is None else {topic: topic_id})

    def commit_many(
        self,
        group: str,
        offsets: Mapping[tuple[str, int], int],
        *,
        topic_ids: TopicIds | None = None,
        metadata: Metadata | None = None,
    ) -> None:
        """Durably and atomically commit ``{(topic, partition): offset}`` of ``group``; return once fsynced.

        ``metadata``: the commit's metadata string per partition (Kafka's OffsetCommit carries one;
        its size is the caller's limit to enforce), stored with the offset and read back by
        :meth:`read_committed_metadata`.
        """
        journal = self._writer()
        end = journal.append(self._clock.now_ms(), _entries(group, offsets, topic_ids, metadata))
        journal.wait_durable(end)

    def submit(
        self,
        group: str,
        offsets: Mapping[tuple[str, int], int],
        on_durable: DurableCallback,
        *,
        topic_ids: TopicIds | None = None,
    ) -> None:
        """Like :meth:`commit_many` but returns once written to the OS, without waiting for the disk.

        ``on_durable(None)`` runs on a background thread once the commit is
        fsynced (and visible to reads), or ``on_durable(error)`` if that fsync
        failed. It must be quick and must not block (from asyncio, hand over
        with ``loop.call_soon_threadsafe``). Bad arguments and write errors
        raise here, and then the callback is never called.
        """
        journal = self._writer()
        journal.append(self._clock.now_ms(), _entries(group, offsets, topic_ids), on_durable)

    def forget_topic(self, topic: str) -> int:
        """Durably remove every group's committed offsets of ``topic`` (it was deleted); return how many."""
        validate_topic(topic)
        return self._forget(lambda key: key[1] == topic)

    def forget_group(self, group: str) -> int:
        """Durably remove every committed offset of ``group``; return how many."""
        validate_group(group)
        return self._forget(lambda key: key[0] == group)

    def forget_partitions(self, group: str, partitions: Iterable[tuple[str, int]]) -> int:
        """Durably remove ``group``'s committed offsets of ``partitions`` (Kafka's OffsetDelete); return how many."""
        validate_group(group)
        wanted = set(partitions)
        return self._forget(lambda key: key[0] == group and (key[1], key[2]) in wanted)

    def _forget(self, match: Callable[[Key], bool]) -> int:
        journal = self._writer()
        with journal.lock:
            keys = journal.keys_where(match)
            if not keys:
                return 0
            entries: list[Entry] = [(g, t, p, None, None, "") for g, t, p in keys]
            # Appended under the same lock that listed the keys, so no key is missed.
            end = journal.append(self._clock.now_ms(), entries)
        journal.wait_durable(end)
        return len(keys)

    def reconcile(self, topic_ids: TopicIds, partitions: Mapping[str, int]) -> tuple[int, int]:
        """Make every committed offset belong to a topic that exists: ``(forgotten, stamped)``.

        Forgets the offsets of topics not in ``topic_ids`` (deleted, even by a delete
        that a crash cut short), of partitions past ``partitions[topic]``, and of another
        incarnation of the topic; stamps offsets written without a topic id (before issue
        12) with the id of the topic that exists. One journal record, durable on return.
        """
        journal = self._writer()
        with journal.lock:
            entries: list[Entry] = []
            forgotten = stamped = 0
            for (group, topic, pid), value in list(journal.values.items()):
                if isinstance(value, CorruptRecordError):
                    continue  # left for verify; never read as a committed offset
                current = topic_ids.get(topic)
                if current is None or pid >= partitions.get(topic, 0) or value.topic_id not in (None, current.hex):
                    entries.append((group, topic, pid, None, None, ""))
                    forgotten += 1
                elif value.topic_id is None:
                    entries.append((group, topic, pid, value.offset, current.hex, value.metadata))
                    stamped += 1
            if not entries:
                return 0, 0
            end = journal.append(self._clock.now_ms(), entries)
        journal.wait_durable(end)
        return forgotten, stamped

    def compact(self) -> None:
        """Write the journal's changes to the ``.offset`` files and start an empty journal now."""
        journal = self._writer()
        with journal.lock:
            journal.compact_locked()

    def close(self) -> None:
        """Release this store; the last store of the directory in this process compacts and unlocks it."""
        if self._closed:
            return
        self._closed = True
        if self._journal is not None:
            self._journal.release()
        if self._follower is not None:
            self._follower.close()

    def __enter__(self) -> OffsetStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _writer(self) -> Journal:
        if self.read_only:
            raise InvalidArgumentError(f"offset store {self.directory} is read-only")
        if self._journal is None:
            raise DataDirLockedError(os.path.join(self.directory, JOURNAL_NAME))
        return self._journal

    # -- reading -----------------------------------------------------------------------------------

    def _values(self) -> dict[Key, Value]:
        if self._journal is not None:
            return self._journal.values
        assert self._follower is not None
        return self._follower.refresh()

    def list_committed(self, *, topic_ids: TopicIds | None = None) -> dict[tuple[str, str, int], int]:
        """Every readable commit as ``{(group, topic, partition): offset}``.

        With ``topic_ids``, only the offsets of those topics' current incarnations
        (offsets without a topic id count as current). Unreadable snapshot files are
        skipped here; ``lkstream verify`` reports them.
        """
        values = self._values()
        return {
            key: value[0]
            for key, value in list(values.items())
            if not isinstance(value, CorruptRecordError) and (topic_ids is None or _current(value, topic_ids, key[1]))
        }

    def read_committed(
        self, group: str, topic: str, partition: int, *, topic_id: uuid.UUID | None = None
    ) -> int | None:
        """The committed offset, or ``None`` if the group never committed this partition.

        With ``topic_id``, an offset committed for another incarnation of the topic (a
        deleted one of the same name) is ``None`` too.
        """
        found = self.read_committed_metadata(group, topic, partition, topic_id=topic_id)
        return None if found is None else found.offset

    def read_committed_metadata(
        self, group: str, topic: str, partition: int, *, topic_id: uuid.UUID | None = None
    ) -> Committed | None:
        """Like :meth:`read_committed`, with the commit's time and metadata string."""
        _validate_key(group, topic, partition)
        value = self._values().get((group, topic, partition))
        if isinstance(value, CorruptRecordError):
            raise value
        if value is None or (topic_id is not None and value.topic_id not in (None, topic_id.hex)):
            return None
        return value


def _validate_key(group: str, topic: str, partition: int) -> None:
    validate_group(group)
    validate_topic(topic)
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise InvalidArgumentError(f"invalid partition {partition!r}")


def _current(value: Committed, topic_ids: TopicIds, topic: str) -> bool:
    current = topic_ids.get(topic)
    return current is not None and value.topic_id in (None, current.hex)


def _entries(
    group: str, offsets: Mapping[tuple[str, int], int], topic_ids: TopicIds | None, metadata: Metadata | None = None
) -> list[Entry]:
    """Validate every key, offset and metadata string before anything is written."""
    if not isinstance(offsets, Mapping) or not offsets:
        raise InvalidArgumentError(
            f"offsets must be a non-empty mapping of (topic, partition) to offset, not {offsets!r}"
        )
    entries: list[Entry] = []
    for key, offset in offsets.items():
        if not isinstance(key, tuple) or len(key) != 2:
            raise InvalidArgumentError(f"invalid key {key!r}: must be (topic, partition)")
        topic, partition = key
        _validate_key(group, topic, partition)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidArgumentError(f"invalid offset {offset!r}: must be a non-negative integer")
        topic_id = None if topic_ids is None else topic_ids.get(topic)
        note = "" if metadata is None else metadata.get(key, "")
        if not isinstance(note, str):
            raise InvalidArgumentError(f"invalid metadata {note!r} for {topic}[{partition}]: must be a string")
        entries.append((group, topic, partition, offset, None if topic_id is None else topic_id.hex, note))
    return entries


def _dir_ident(directory: str) -> tuple[int, int]:
    st = os.stat(directory)
    return (st.st_dev, st.st_ino)
