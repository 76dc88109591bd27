"""The security files on disk: read strictly, edited atomically under a lock, reloaded when they change.

The users file and the ACL file are small JSON documents that operators edit with
``lkstream users`` and ``lkstream acls`` while the daemon runs:

* :func:`edit_file` applies one change under an exclusive ``flock`` on ``PATH.lock``
  (two concurrent edits never lose each other's change), then replaces the file
  atomically (tmp + fsync + rename + directory fsync, mode 0600): a reader sees
  the old or the new document, never a mix.
* :class:`WatchedFile` hands the daemon the parsed document and re-reads it when the
  file's identity (inode, size, mtime, ctime) changes, checked at most once per
  ``check_interval_s``. So a grant or a revocation takes effect within that interval
  with no restart. A missing file is the empty document (nobody and nothing is
  allowed: fail closed). A changed file that does not parse is logged and the last
  good document stays in force; the same file at start-up is an error instead.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from lkstream.errors import InvalidArgumentError
from lkstream.storage.files import atomic_write

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger("lkstream.security")

#: Permission bits of the security files and their directory: they hold credentials.
PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700

_Identity = tuple[int, int, int, int, int]


def _identity(path: str) -> _Identity | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def parse_document(data: bytes, version: int, key: str, kind: type, what: str) -> Any:
    """``data`` as JSON ``{"version": version, key: <kind>}``; return the ``key`` value.

    Raises :class:`InvalidArgumentError` saying what was expected.
    """
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"not a JSON {what} file: {exc}") from None
    if not isinstance(raw, dict) or raw.get("version") != version or not isinstance(raw.get(key), kind):
        empty = "[...]" if kind is list else "{...}"
        raise InvalidArgumentError(f'expected {{"version": {version}, "{key}": {empty}}}')
    return raw[key]


def read_file(path: str, parse: Callable[[bytes], T], empty: Callable[[], T]) -> T:
    """Parse the file at ``path`` (the empty document when it does not exist).

    Raises :class:`InvalidArgumentError` naming the file when it cannot be read or parsed.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return empty()
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return parse(data)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{path}: {exc}") from None


def edit_file(
    path: str,
    parse: Callable[[bytes], T],
    empty: Callable[[], T],
    serialize: Callable[[T], bytes],
    change: Callable[[T], R],
) -> R:
    """Read the document at ``path``, apply ``change`` (which mutates it), write it back; return the result.

    Serialised with every other :func:`edit_file` of the same path by an exclusive
    lock; when ``change`` raises, nothing is written.
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, mode=PRIVATE_DIR_MODE, exist_ok=True)
        lock = os.fdopen(os.open(f"{path}.lock", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE), "w")
    except OSError as exc:
        raise InvalidArgumentError(f"cannot edit {path}: {exc.strerror or exc}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        document = read_file(path, parse, empty)
        result = change(document)
        atomic_write(path, serialize(document), mode=PRIVATE_FILE_MODE)
    return result


class WatchedFile(Generic[T]):
    """A parsed security file, re-read when it changes on disk. Thread-safe.

    :meth:`current` costs one ``stat`` per ``check_interval_s`` at most; between checks
    it returns the document it holds.
    """

    def __init__(
        self,
        path: str,
        parse: Callable[[bytes], T],
        empty: Callable[[], T],
        *,
        check_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._parse = parse
        self._empty = empty
        self._interval = check_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._seen = _identity(path)
        # Start-up is strict: a file that does not parse is an error, not an empty document.
        self._document = read_file(path, parse, empty)
        self._next_check = clock() + check_interval_s
        #: Counts the documents loaded: it moves whenever :meth:`current` may answer differently.
        self.version = 0

    def current(self) -> T:
        """The document in force, re-read first if the file changed since the last look."""
        now = self._clock()
        if now < self._next_check:
            return self._document
        with self._lock:
            if now >= self._next_check:
                self._next_check = now + self._interval
                self._reload_if_changed()
            return self._document

    def check_now(self) -> None:
        """Look at the file now, whatever the interval (SIGHUP)."""
        with self._lock:
            self._next_check = self._clock() + self._interval
            self._reload_if_changed()

    def _reload_if_changed(self) -> None:
        seen = _identity(self.path)
        if seen == self._seen:
            return
        self._seen = seen
        try:
            self._document = read_file(self.path, self._parse, self._empty)
        except InvalidArgumentError as exc:
            log.error("security file changed but was not loaded, the previous version stays in force: %s", exc)
            return
        self.version += 1
        log.info("reloaded %s", self.path)
