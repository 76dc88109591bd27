"""The exclusive lock that makes one broker the only owner of a data directory."""

from __future__ import annotations

import fcntl
import os

from lkstream.errors import DataDirLockedError, map_os_errors

LOCK_NAME = "LOCK"


class DataDirLock:
    """An ``flock`` on ``{persist_dir}/LOCK``, held for the broker's lifetime.

    The kernel drops the lock when the process dies, even by SIGKILL, so a
    crashed broker never leaves a stale lock behind. The file holds the owner's
    pid for operators; it is not used for locking.
    """

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, LOCK_NAME)
        with map_os_errors("open lock file", self.path):
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise DataDirLockedError(self.path) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1
