"""``lkstream restore``: a backup put back into an empty data directory, trusting nothing in it.

A backup is a directory anyone with write access to the backup store could have changed, so
restoring it (often as the daemon's user, sometimes as root) must not let it reach anything
else (issue 28, finding 9). The rules:

* **Only the files the manifest names.** ``backup.json`` (format 2) lists every file with
  its size and CRC-32C; nothing else in the backup directory is read. A format-1 manifest
  (before the list) is restored from a walk of the directory under the same rules, without
  checksums (a note says so: ``lkstream verify`` the result).
* **Only names of the data-directory layout** (:func:`layout_path`): ``topics/<topic>/topic.json``,
  ``topics/<topic>/part<N>/<base>.seg|.idx``, ``checkpoint.meta``, ``producers.snapshot``, ``marks.meta``,
  ``offsets/<name>.offset``, ``producer_ids`` and the security files. No absolute path, no
  ``..``, no other name: a manifest naming one is refused whole and nothing is written.
* **Only regular files, never through a link.** Each directory of a path is opened with
  ``O_NOFOLLOW | O_DIRECTORY`` relative to the one before, the file with ``O_NOFOLLOW``, and
  its ``fstat`` must say regular file: a symbolic link anywhere (the file, or a directory on
  the way) or a device, FIFO or socket is refused. Files are written with ``O_EXCL`` into a
  staging directory this process just made, then renamed into place.
* **Checksums.** Each file's size and CRC-32C are checked as it is copied; a mismatch stops
  the restore and removes what it wrote.
* **Security files only when asked.** ``security/users.json`` and ``security/acls.json`` (a
  backup of a daemon with authentication, finding 10) grant access: a forged one would let
  whoever wrote it in. They are restored only with ``with_security`` (``--with-security``),
  with their mode (0600), after the command showed what they grant
  (:func:`read_backup_file` lets it read them under the same rules).

Thread-safety: one call per thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import crc32c

from lkstream.errors import CorruptRecordError, InvalidArgumentError, map_os_errors
from lkstream.storage.backup import MANIFEST, BackupFile, BackupReport, check_target, staged
from lkstream.storage.marks import MARKS_NAME
from lkstream.storage.names import shown, validate_topic
from lkstream.storage.segment import INDEX_SUFFIX, SEGMENT_SUFFIX

SECURITY_DIR: Final = "security"
#: The security files a backup may carry, restored only when asked.
SECURITY_FILES: Final = (f"{SECURITY_DIR}/users.json", f"{SECURITY_DIR}/acls.json")
PRODUCER_IDS: Final = "producer_ids"
_PARTITION_DIR: Final = re.compile(r"part(0|[1-9]\d{0,8})")
_PARTITION_FILE: Final = re.compile(rf"\d{{20}}({re.escape(SEGMENT_SUFFIX)}|{re.escape(INDEX_SUFFIX)})")
_PARTITION_META: Final = frozenset({"checkpoint.meta", "producers.snapshot", MARKS_NAME})
# Readable names (group__topic__partN.offset) and hashed ones (~<hex>.offset): one safe component.
_OFFSET_FILE: Final = re.compile(r"[A-Za-z0-9_~-][A-Za-z0-9._~-]{0,247}\.offset")
_COPY_CHUNK: Final = 1 << 20
_SECURITY_MODE: Final = 0o600


@dataclass
class RestoreReport:
    """What a restore did: the backup's manifest, and what it left out or could not check."""

    manifest: BackupReport
    security_files: list[str] = field(default_factory=list)  # in the backup
    security_restored: bool = False
    notes: list[str] = field(default_factory=list)


def escaped(text: str) -> str:
    """``text`` with every character a terminal would act on written as an escape (``\\x1b``, ``\\n``)."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def layout_path(path: object) -> tuple[str, ...]:
    """The components of ``path`` if it names a file of the data-directory layout, else InvalidArgumentError."""
    parts = tuple(path.split("/")) if isinstance(path, str) else ()
    if _in_layout(parts):
        return parts
    raise InvalidArgumentError(
        f"the backup names {escaped(shown(path))}, which is not a file of an lkstream data directory: "
        "refusing the whole backup"
    )


def _in_layout(parts: tuple[str, ...]) -> bool:
    match parts:
        case (name,):
            return name == PRODUCER_IDS
        case ("offsets", name):
            return _OFFSET_FILE.fullmatch(name) is not None
        case (SECURITY_DIR, name):
            return f"{SECURITY_DIR}/{name}" in SECURITY_FILES
        case ("topics", topic, "topic.json"):
            return _is_topic(topic)
        case ("topics", topic, partition, name):
            return (
                _is_topic(topic)
                and _PARTITION_DIR.fullmatch(partition) is not None
                and (name in _PARTITION_META or _PARTITION_FILE.fullmatch(name) is not None)
            )
    return False


def _is_topic(name: str) -> bool:
    try:
        validate_topic(name)
    except InvalidArgumentError:
        return False
    return True


def restore_backup(backup: str, data_dir: str, *, with_security: bool = False) -> RestoreReport:
    """Copy the files of the backup ``backup`` into ``data_dir``, which must be empty or absent."""
    manifest = read_manifest(backup)
    files = manifest.files if manifest.files is not None else _walk(backup)
    for entry in files:
        layout_path(entry.path)  # every name checked before anything is written
    report = RestoreReport(manifest)
    report.security_files = [f.path for f in files if f.path in SECURITY_FILES]
    if manifest.files is None:
        report.notes.append(
            "a format-1 backup lists no checksums: its files were copied unchecked; run lkstream verify on the result"
        )
    wanted = [f for f in files if with_security or f.path not in SECURITY_FILES]
    report.security_restored = with_security and bool(report.security_files)
    check_target(data_dir, "restore into")
    with staged(data_dir, "restoring") as staging, map_os_errors("restore", backup):
        for partition in manifest.partitions:  # a partition never written has a directory and no file
            directory = ("topics", partition.topic, f"part{partition.partition}", "checkpoint.meta")
            os.makedirs(os.path.join(staging, *layout_path("/".join(directory))[:-1]), exist_ok=True)
        for entry in wanted:
            _copy(backup, entry, staging)
    return report


def read_manifest(backup: str) -> BackupReport:
    """The manifest of ``backup``; InvalidArgumentError if it has none or it does not parse."""
    path = os.path.join(backup, MANIFEST)
    if not os.path.lexists(path):
        raise InvalidArgumentError(f"{backup} is not an lkstream backup (it has no {MANIFEST})")
    return BackupReport.from_json(read_backup_file(backup, MANIFEST), path)


def read_backup_file(backup: str, path: str) -> bytes:
    """The bytes of ``path`` in ``backup``, read under the restore's rules (no link, a regular file)."""
    with map_os_errors("read", os.path.join(backup, path)), _open_in(backup, path) as fd:
        chunks = []
        while chunk := os.read(fd, _COPY_CHUNK):
            chunks.append(chunk)
    return b"".join(chunks)


@contextlib.contextmanager
def _open_in(root: str, path: str) -> Iterator[int]:
    """A descriptor of the regular file ``path`` under ``root``, no component followed as a link."""
    *directories, name = path.split("/")
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for directory in directories:
            try:
                fds.append(os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fds[-1]))
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                raise CorruptRecordError("a directory on the way is a link or a file: refused", path=path) from None
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fds[-1])
        except OSError as exc:
            if os.path.islink(os.path.join(root, path)):
                raise CorruptRecordError("a symbolic link, not a file: refused", path=path) from None
            raise exc
        fds.append(fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CorruptRecordError("not a regular file: refused", path=path)
        yield fd
    finally:
        for fd in reversed(fds):
            os.close(fd)


def _copy(backup: str, entry: BackupFile, staging: str) -> None:
    """Copy one named file into ``staging``, checking its size and CRC-32C when the manifest has them."""
    target = os.path.join(staging, *entry.path.split("/"))
    security = entry.path in SECURITY_FILES
    os.makedirs(os.path.dirname(target), mode=0o700 if security else 0o777, exist_ok=True)
    mode = _SECURITY_MODE if security else 0o666
    crc, size = 0, 0
    with _open_in(backup, entry.path) as source:
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        try:
            while chunk := os.read(source, _COPY_CHUNK):
                os.write(out, chunk)
                crc, size = crc32c.crc32c(chunk, crc), size + len(chunk)
        finally:
            os.close(out)
    if entry.size >= 0 and (size, crc) != (entry.size, entry.crc32c):
        raise CorruptRecordError(
            f"{size} bytes with CRC-32C {crc:08x}, the manifest says {entry.size} bytes with {entry.crc32c:08x}",
            path=entry.path,
        )


def _walk(backup: str) -> list[BackupFile]:
    """A format-1 backup's files, found without following links (sizes and CRCs unknown: -1)."""
    found: list[BackupFile] = []
    for directory, subdirectories, names in os.walk(backup, followlinks=False):
        relative = os.path.relpath(directory, backup)
        prefix = "" if relative == "." else relative.replace(os.sep, "/") + "/"
        for name in sorted(names + [d for d in subdirectories if os.path.islink(os.path.join(directory, d))]):
            if prefix or name != MANIFEST:
                found.append(BackupFile(prefix + name, -1, -1))
    return found
