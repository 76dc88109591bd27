"""Online backup and restore of a data directory (``lkstream backup`` / ``lkstream restore``).

A backup is taken **beside a running daemon, without its cooperation and without
its LOCK**: everything is read through the read-only views of
:mod:`lkstream.storage.reader` and :mod:`lkstream.storage.offset_journal`, as
``lkstream verify`` reads. It is consistent per partition: each partition holds
a contiguous run of whole, CRC-valid batches from its log start up to the
``end_offset`` the manifest states.

The backup is **a directory that is itself a data directory** (plus
``backup.json``), not a tar file: ``lkstream verify BACKUP`` checks it as it is,
``lkstream consume --data-dir BACKUP`` and Spark's ``path`` option read it without
a restore, ``rsync`` copies it incrementally (sealed segments never change), and
restoring is a copy. ``tar -cf`` it to ship it as one file.

How each piece is copied:

* **Committed offsets first.** The offsets journal is replayed read-only
  (:class:`~lkstream.storage.offset_journal.JournalFollower`, which retries if
  compaction swaps the journal mid-read) and written out as one snapshot
  ``.offset`` file per key. Taken before the segments, so no committed offset in
  the backup is ahead of the records it holds (data only grows).
* **Segments.** Each segment file is opened once and read through that
  descriptor, so retention or a topic delete unlinking it mid-copy cannot tear
  it. Every batch is checked (length, CRC, contiguous offsets). Sealed segments
  are copied whole; the active (last) one up to the end of its last whole, valid
  batch: a batch being written is left out, as recovery would leave it out.
  Corruption in a sealed segment stops the backup (``lkstream verify`` the
  source). Indexes are rebuilt from the walk rather than copied (the active
  index lags its segment), and a ``checkpoint.meta`` naming the copied end is
  written, so the restored log opens without re-validating.
* **Files that vanish mid-copy.** A segment deleted by retention before it was
  opened moves the partition's log start past it (the segments copied before it
  are dropped, keeping the partition contiguous); a topic deleted mid-copy is
  left out and named in the manifest's ``notes``. The log cleaner may merge
  segments meanwhile (issue 24): a segment that vanishes while an older one stays,
  or one whose offsets the segment copied before it already holds, means the
  partition changed under the copy, which then starts over from a new listing
  (a few times; a clean rewrites each segment group once).
* **The log start.** ``marks.meta`` (DeleteRecords' log start, the cleaner's
  progress) is copied, so a restored log starts where the source did.
* **Producer ids** (``producer_ids``), after the segments: every id in a copied batch is
  below the counter, so a restored daemon never hands an id out again to a new producer
  whose first batch would pass for an old producer's duplicate.
* **Security files** (issue 28, finding 10): the users and ACL files (by default
  ``security/users.json`` and ``security/acls.json`` under the data directory) with mode
  0600, so a backup of a daemon with authentication keeps its users, tokens and ACLs. A
  restore puts them back only when asked (:mod:`lkstream.storage.restore`).
* **An inventory.** ``backup.json`` (format 2) lists every file with its size and CRC-32C:
  a restore copies exactly those and checks them.
* **Atomic.** Everything is written (and fsynced) under ``DEST.partial-PID`` and
  renamed to ``DEST`` at the end, so an interrupted backup never looks complete.

Restore is :mod:`lkstream.storage.restore`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import crc32c

from lkstream.errors import CorruptRecordError, InvalidArgumentError, LkstreamError, StorageError
from lkstream.storage.checkpoint import Checkpoint, write_checkpoint
from lkstream.storage.files import OsFile, atomic_write, fsync_dir
from lkstream.storage.index import ENTRY
from lkstream.storage.marks import Marks, MarksDamaged, read_marks, write_marks
from lkstream.storage.offset_files import offset_file_name, read_offset_file, snapshot_body
from lkstream.storage.offset_journal import JournalFollower
from lkstream.storage.offsets import OFFSETS_DIR
from lkstream.storage.reader import DataDirReader, ScanProblem, list_segments, open_read_only, scan_segment
from lkstream.storage.segment import INDEX_SUFFIX, SEGMENT_SUFFIX, format_segment_name
from lkstream.storage.topics import TOPICS_DIR

MANIFEST: Final = "backup.json"
#: 2: the manifest lists every file (``files``); 1 (read too) did not.
FORMAT_VERSION: Final = 2
#: Where the security files go in a backup, and their mode there.
SECURITY_DIR: Final = "security"
SECURITY_NAMES: Final = ("users.json", "acls.json")
_SECURITY_MODE: Final = 0o600
PRODUCER_IDS: Final = "producer_ids"
#: Segment bytes between index entries of a copied segment (the broker's default ``index_interval_bytes``).
INDEX_INTERVAL_BYTES: Final = 4096
_COPY_CHUNK: Final = 1 << 20
_TOPIC_META: Final = "topic.json"


@dataclass(frozen=True)
class PartitionSnapshot:
    """What a backup holds of one partition: offsets ``[log_start_offset, end_offset)``."""

    topic: str
    partition: int
    log_start_offset: int
    end_offset: int
    segments: int
    bytes: int


@dataclass(frozen=True)
class BackupFile:
    """One file of a backup: its path under the backup (``/``-separated), size and CRC-32C (-1: unknown)."""

    path: str
    size: int
    crc32c: int

    @classmethod
    def from_json(cls, raw: Any) -> BackupFile:
        path, size, crc = raw["path"], raw["size"], raw["crc32c"]
        if not (isinstance(path, str) and type(size) is int and type(crc) is int and size >= 0 and 0 <= crc < 2**32):
            raise ValueError(f"bad file entry {str(raw)[:80]}")
        return cls(path, size, crc)


@dataclass
class BackupReport:
    """The manifest of a backup (``backup.json``); ``files`` is None for a format-1 backup."""

    source: str
    created_ms: int
    partitions: list[PartitionSnapshot] = field(default_factory=list)
    committed_offsets: int = 0
    notes: list[str] = field(default_factory=list)
    format: int = FORMAT_VERSION
    files: list[BackupFile] | None = None

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1).encode() + b"\n"

    @classmethod
    def from_json(cls, raw: bytes, path: str) -> BackupReport:
        try:
            doc = json.loads(raw)
            if doc.get("format") not in (1, FORMAT_VERSION):
                raise ValueError(f"format {str(doc.get('format'))[:20]}, this lkstream reads 1 and {FORMAT_VERSION}")
            parts = [PartitionSnapshot(**p) for p in doc["partitions"]]
            files = None if doc["format"] == 1 else [BackupFile.from_json(f) for f in doc["files"]]
            notes = [str(note) for note in doc["notes"]]
            report = cls(str(doc["source"]), int(doc["created_ms"]), parts, int(doc["committed_offsets"]), notes)
            report.format, report.files = doc["format"], files
            return report
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidArgumentError(f"{path} is not an lkstream backup manifest ({exc})") from None


class _Vanished(Exception):
    """A file the backup was about to read is gone (retention, topic delete)."""


def default_security_files(data_dir: str) -> list[str]:
    """Where a daemon on ``data_dir`` keeps its users and ACL files unless its config says otherwise."""
    return [os.path.join(data_dir, SECURITY_DIR, name) for name in SECURITY_NAMES]


def backup_data_dir(source: str, dest: str, *, security_files: Sequence[str] | None = None) -> BackupReport:
    """Snapshot the data directory ``source`` (a daemon may be running on it) into the new directory ``dest``.

    ``security_files``: the users file and the ACL file, in that order (default: under
    ``source/security/``); those that exist are copied as ``security/users.json`` and
    ``security/acls.json``.
    """
    reader = DataDirReader(source)
    check_target(dest, "back up into")
    report = BackupReport(os.path.abspath(source), int(time.time() * 1000))
    with staged(dest, "partial") as staging:
        os.makedirs(os.path.join(staging, TOPICS_DIR))
        report.committed_offsets = _copy_offsets(source, staging, report)
        for topic in reader.topics():
            _copy_topic(reader, topic, staging, report)
        report.committed_offsets -= _drop_orphan_offsets(staging, {p.topic for p in report.partitions}, report)
        _copy_producer_ids(source, staging)
        _copy_security(security_files or default_security_files(source), staging)
        report.files = _inventory(staging)
        atomic_write(os.path.join(staging, MANIFEST), report.to_json())
    return report


@contextlib.contextmanager
def staged(final: str, what: str) -> Iterator[str]:
    """A temporary sibling of ``final`` to fill; fsynced and renamed to ``final`` on success, removed on failure."""
    staging = f"{final.rstrip('/')}.{what}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    # Made here, never reused: whatever still sits at that name (a link planted beside the target)
    # fails the mkdir instead of receiving the files.
    os.mkdir(staging)
    try:
        yield staging
        _fsync_tree(staging)
        _publish(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


# -- offsets ----------------------------------------------------------------------------------------


def _copy_offsets(source: str, staging: str, report: BackupReport) -> int:
    follower = JournalFollower(os.path.join(source, OFFSETS_DIR))
    try:
        values = dict(follower.refresh())
    finally:
        follower.close()
    target = os.path.join(staging, OFFSETS_DIR)
    os.makedirs(target)
    copied = 0
    for key, value in sorted(values.items(), key=lambda kv: kv[0]):
        if isinstance(value, CorruptRecordError):
            report.notes.append(f"committed offset of {key} left out: {value}")
            continue
        body = snapshot_body(key, value._replace(topic_id=None))
        with open(os.path.join(target, offset_file_name(key)), "wb") as f:
            f.write(body)
        copied += 1
    return copied


def _drop_orphan_offsets(staging: str, topics: set[str], report: BackupReport) -> int:
    """Remove the committed offsets of topics the backup does not hold (deleted while it ran); how many."""
    directory = os.path.join(staging, OFFSETS_DIR)
    dropped = 0
    for name in sorted(os.listdir(directory)):
        found = read_offset_file(directory, name)
        key = None if found is None else found[0]
        if key is not None and key[1] not in topics:
            os.remove(os.path.join(directory, name))
            dropped += 1
    if dropped:
        report.notes.append(f"{dropped} committed offset(s) of topics not in the backup left out")
    return dropped


# -- topics and partitions ----------------------------------------------------------------------------


def _copy_topic(reader: DataDirReader, topic: str, staging: str, report: BackupReport) -> None:
    topic_dir = os.path.join(reader.topics_dir, topic)
    target = os.path.join(staging, TOPICS_DIR, topic)
    snapshots = []
    try:
        meta = _read_whole(os.path.join(topic_dir, _TOPIC_META), missing_ok=True)
        os.makedirs(target)
        if meta is not None:
            with open(os.path.join(target, _TOPIC_META), "wb") as f:
                f.write(meta)
        for pid in reader.partitions(topic):
            snapshots.append(_copy_partition(reader.partition_dir(topic, pid), topic, pid, target))
    except (_Vanished, OSError, LkstreamError):
        if os.path.isdir(topic_dir):
            raise
        shutil.rmtree(target, ignore_errors=True)
        report.notes.append(f"topic {topic!r} was deleted while the backup ran: left out")
        return
    report.partitions.extend(snapshots)


#: Copies of one partition started over because the cleaner rewrote segments under the backup.
_PARTITION_TRIES: Final = 5


class _Rewritten(Exception):
    """A segment vanished while an older one is still there: the cleaner merged segments meanwhile."""


def _copy_partition(directory: str, topic: str, pid: int, target_topic: str) -> PartitionSnapshot:
    target = os.path.join(target_topic, os.path.basename(directory))
    for _ in range(_PARTITION_TRIES - 1):
        try:
            return _copy_partition_once(directory, topic, pid, target)
        except _Rewritten:
            shutil.rmtree(target, ignore_errors=True)  # start over from a new listing
    return _copy_partition_once(directory, topic, pid, target)


def _copy_partition_once(directory: str, topic: str, pid: int, target: str) -> PartitionSnapshot:
    os.makedirs(target)
    segments = list_segments(directory)
    copied: list[tuple[int, int, int]] = []  # (base offset, bytes, next offset)
    for i, seg in enumerate(segments):
        try:
            file = open_read_only(seg.seg_path)
        except StorageError as exc:
            if os.path.exists(seg.seg_path):
                raise
            if copied and os.path.exists(os.path.join(directory, format_segment_name(copied[-1][0]))):
                # Retention and DeleteRecords remove the oldest segments first: this one went while an
                # older one stays, so the cleaner merged it into a rewritten segment after we copied that.
                raise _Rewritten(seg.seg_path) from exc
            # Retention deleted it (oldest first): the log now starts after it.
            for base, _, _ in copied:
                for suffix in (SEGMENT_SUFFIX, INDEX_SUFFIX):
                    os.remove(os.path.join(target, format_segment_name(base, suffix)))
            copied = []
            if i == len(segments) - 1 and not os.path.isdir(directory):
                raise _Vanished(directory) from exc
            continue
        try:
            expected = copied[-1][2] if copied else None
            if expected is not None and seg.base_offset < expected:
                raise _Rewritten(seg.seg_path)  # the copy before it was a rewrite that holds its offsets
            if expected is not None and seg.base_offset != expected:
                raise CorruptRecordError(
                    f"segment starts at offset {seg.base_offset}, the previous one ends before {expected}",
                    path=seg.seg_path,
                )
            size, next_offset = _copy_segment(file, seg.base_offset, target, active=i == len(segments) - 1)
        finally:
            file.close()
        copied.append((seg.base_offset, size, next_offset))
    if copied:
        sealed = copied[-2][0] if len(copied) > 1 else -1
        base, size, end = copied[-1]
        write_checkpoint(target, Checkpoint(sealed, base, size, end))
    start = copied[0][0] if copied else 0
    marks = _copy_marks(directory, target)
    if marks is not None:
        start = max(start, marks.log_start_offset)
    end = copied[-1][2] if copied else 0
    return PartitionSnapshot(topic, pid, start, end, len(copied), sum(size for _, size, _ in copied))


def _copy_segment(file: OsFile, base: int, target: str, *, active: bool) -> tuple[int, int]:
    """Copy the valid batches of an open segment and write their index; ``(bytes copied, next offset)``."""
    end, next_offset, last_entry = 0, base, -INDEX_INTERVAL_BYTES
    entries = bytearray()
    for item in scan_segment(file, expected_offset=base):
        if isinstance(item, ScanProblem):
            if active:
                break  # a batch being written (or torn by a crash): recovery ends the log here too
            raise CorruptRecordError(item.reason + " (run lkstream verify on the source)", path=item.path)
        if item.position - last_entry >= INDEX_INTERVAL_BYTES:
            entries += ENTRY.pack(item.header.base_offset, item.position)
            last_entry = item.position
        end, next_offset = item.position + item.header.size, item.header.next_offset
    with open(os.path.join(target, format_segment_name(base, SEGMENT_SUFFIX)), "wb") as out:
        position = 0
        while position < end:
            chunk = file.pread(min(_COPY_CHUNK, end - position), position)
            if not chunk:
                raise StorageError(f"segment shrank to {position} bytes while it was copied", path=file.path)
            out.write(chunk)
            position += len(chunk)
    with open(os.path.join(target, format_segment_name(base, INDEX_SUFFIX)), "wb") as out:
        out.write(entries)
    return end, next_offset


def _copy_marks(directory: str, target: str) -> Marks | None:
    """Copy ``marks.meta`` (the log start and the cleaner's progress), if there is a valid one."""
    try:
        marks = read_marks(directory)
    except MarksDamaged:
        return None  # the broker ignores a damaged one too
    if marks is not None:
        write_marks(target, marks)
    return marks


# -- producer ids, security files, the inventory --------------------------------------------------------


def _copy_producer_ids(source: str, staging: str) -> None:
    data = _read_whole(os.path.join(source, PRODUCER_IDS), missing_ok=True)
    if data is not None:
        with open(os.path.join(staging, PRODUCER_IDS), "wb") as f:
            f.write(data)


def _copy_security(paths: Sequence[str], staging: str) -> None:
    """Copy the users and ACL files that exist, mode 0600 in a 0700 directory (they hold credentials)."""
    target = os.path.join(staging, SECURITY_DIR)
    for path, name in zip(paths, SECURITY_NAMES, strict=True):
        data = _read_whole(path, missing_ok=True)
        if data is None:
            continue
        os.makedirs(target, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(target, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, _SECURITY_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def _inventory(staging: str) -> list[BackupFile]:
    """Every file under ``staging`` with its size and CRC-32C, for the manifest."""
    files = []
    for directory, _, names in os.walk(staging):
        for name in names:
            path = os.path.join(directory, name)
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            crc, size = 0, 0
            with open(path, "rb") as f:
                while chunk := f.read(_COPY_CHUNK):
                    crc, size = crc32c.crc32c(chunk, crc), size + len(chunk)
            files.append(BackupFile(os.path.relpath(path, staging).replace(os.sep, "/"), size, crc))
    return sorted(files, key=lambda f: f.path)


# -- files ------------------------------------------------------------------------------------------


def _read_whole(path: str, *, missing_ok: bool = False) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        if missing_ok:
            return None
        raise _Vanished(path) from None


def check_target(path: str, action: str) -> None:
    """``path`` must not exist, or be an empty directory: a backup or restore never mixes with other files."""
    if not os.path.lexists(path):
        return
    if not os.path.isdir(path):
        raise InvalidArgumentError(f"cannot {action} {path}: it exists and is not a directory")
    if os.listdir(path):
        raise InvalidArgumentError(f"refusing to {action} {path}: it is not empty")


def _fsync_tree(root: str) -> None:
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(directory)


def _publish(staging: str, final: str) -> None:
    """Rename the finished tree into place (over an empty directory, which rename allows) and fsync its parent."""
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(final)  # empty, checked before: rename(2) cannot replace a directory that is not empty
    os.rename(staging, final)
    fsync_dir(os.path.dirname(os.path.abspath(final)))


def summary(report: BackupReport) -> dict[str, Any]:
    """Totals for a one-line report: partitions, records (offsets held), bytes."""
    return {
        "topics": len({p.topic for p in report.partitions}),
        "partitions": len(report.partitions),
        "records": sum(p.end_offset - p.log_start_offset for p in report.partitions),
        "bytes": sum(p.bytes for p in report.partitions),
        "committed_offsets": report.committed_offsets,
    }
