"""The one error hierarchy of LKSTREAM.

Every failure a user can cause or meet is one of these classes; raw ``OSError``
and library exceptions are mapped at the layer boundary (:func:`map_os_errors`).
Broken internal invariants are *not* ``LkstreamError``: they raise
:class:`InvariantViolation` (an ``AssertionError``) and should crash the process.

::

    LkstreamError                      base; ``retriable`` says whether retrying can help
    ├── InvalidArgumentError           bad name, size, partition, option (nothing was written)
    │   └── RecordTooLargeError        a record above ``max_message_bytes`` or a batch above ``max_batch_bytes``
    ├── UnknownTopicError              topic does not exist (and auto-create is off)
    ├── TopicExistsError               create_topic on an existing topic
    ├── OffsetOutOfRangeError          offset outside [log_start_offset, next_offset]
    ├── CorruptRecordError             a batch failed its length, magic or CRC check
    ├── BackpressureError              in-flight bytes above ``max_inflight_bytes`` (retriable)
    ├── StorageError                   an OS-level I/O failure, with the path
    │   └── DiskFullError              ENOSPC / EDQUOT (retriable once space is freed)
    ├── DataDirLockedError             another broker holds the data directory
    ├── BrokerClosedError              the broker was closed
    ├── BrokerUnavailableError         a remote client cannot reach the daemon (retriable)
    └── ProtocolVersionError           client and daemon speak incompatible protocol versions
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager


class LkstreamError(Exception):
    """Base of every error LKSTREAM raises on purpose."""

    retriable: bool = False


class InvalidArgumentError(LkstreamError, ValueError):
    """An argument was rejected before anything was written."""


class RecordTooLargeError(InvalidArgumentError):
    """A message or batch is larger than the configured limit."""

    def __init__(self, size: int, limit: int, what: str = "message") -> None:
        super().__init__(f"{what} of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class UnknownTopicError(LkstreamError, KeyError):
    """The topic does not exist."""

    def __init__(self, topic: str) -> None:
        super().__init__(f"unknown topic {topic!r}")
        self.topic = topic

    def __str__(self) -> str:  # KeyError would repr() the message otherwise
        return str(self.args[0])


class TopicExistsError(LkstreamError):
    """A topic of that name already exists."""

    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} already exists")
        self.topic = topic


class OffsetOutOfRangeError(LkstreamError):
    """The offset is outside the partition's readable range.

    ``earliest`` is the log start offset (retention may have moved it) and
    ``latest`` the high watermark (the next offset a reader will see); readable offsets are
    ``earliest <= offset <= latest`` (reading at ``latest`` waits for new data).
    """

    def __init__(self, topic: str, partition: int, offset: int, earliest: int, latest: int) -> None:
        super().__init__(
            f"offset {offset} is out of range for {topic}[{partition}]: earliest is {earliest}, latest is {latest}"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.earliest = earliest
        self.latest = latest


class CorruptRecordError(LkstreamError):
    """Bytes that should hold a record batch failed validation.

    ``path`` and ``position`` locate the batch when it came from disk.
    """

    def __init__(self, reason: str, *, path: str | None = None, position: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f" in {path}" + (f" at byte {position}" if position is not None else "")
        super().__init__(f"corrupt record batch{where}: {reason}")
        self.reason = reason
        self.path = path
        self.position = position


class BackpressureError(LkstreamError):
    """The broker holds more accepted-but-unacknowledged bytes than allowed."""

    retriable = True

    def __init__(self, inflight_bytes: int, limit: int) -> None:
        super().__init__(
            f"backpressure: {inflight_bytes} bytes in flight would exceed max_inflight_bytes={limit}; retry later"
        )
        self.inflight_bytes = inflight_bytes
        self.limit = limit


class StorageError(LkstreamError):
    """The operating system refused an I/O operation."""

    def __init__(self, message: str, *, path: str | None = None, errno_: int | None = None) -> None:
        super().__init__(message if path is None else f"{message}: {path}")
        self.path = path
        self.errno = errno_


class DiskFullError(StorageError):
    """No space left on the device holding the data directory."""

    retriable = True


class DataDirLockedError(LkstreamError):
    """Another broker process already owns the data directory."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"data directory is locked by another broker ({path}); stop that broker or use another persist_dir"
        )
        self.path = path


class BrokerClosedError(LkstreamError):
    """The broker was closed; no further calls are accepted."""


class BrokerUnavailableError(LkstreamError):
    """The daemon at ``address`` cannot be reached (not running, wrong address, shutting down)."""

    retriable = True

    def __init__(self, address: str, reason: str = "") -> None:
        super().__init__(f"cannot reach the lkstream daemon at {address}" + (f": {reason}" if reason else ""))
        self.address = address


class ProtocolVersionError(LkstreamError):
    """The daemon does not accept the client's protocol version."""

    def __init__(self, client_version: int, server_version: int, min_client_version: int) -> None:
        super().__init__(
            f"client protocol version {client_version} is not supported: the server speaks protocol version "
            f"{server_version} and accepts client versions {min_client_version}..{server_version}"
        )
        self.client_version = client_version
        self.server_version = server_version


class InvariantViolation(AssertionError):
    """An internal invariant broke: a bug, never a user error."""


def invariant(condition: bool, message: str) -> None:
    """Check an invariant that must hold even under ``python -O``."""
    if not condition:
        raise InvariantViolation(message)


_DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


@contextmanager
def map_os_errors(action: str, path: str) -> Iterator[None]:
    """Turn ``OSError`` raised inside the block into :class:`StorageError`."""
    try:
        yield
    except OSError as exc:
        if exc.errno in _DISK_FULL_ERRNOS:
            raise DiskFullError(f"disk full while trying to {action}", path=path, errno_=exc.errno) from exc
        raise StorageError(f"cannot {action} ({exc.strerror})", path=path, errno_=exc.errno) from exc
