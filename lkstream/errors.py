"""The one error hierarchy of LKSTREAM.

Every failure a user can cause or meet is one of these classes; raw ``OSError``
and library exceptions are mapped at the layer boundary (:func:`map_os_errors`).
Broken internal invariants are *not* ``LkstreamError``: they raise
:class:`InvariantViolation` (an ``AssertionError``) and should crash the process.

::

    LkstreamError                      base; ``retriable`` says whether retrying can help
    ├── InvalidArgumentError           bad name, size, partition, option (nothing was written)
    │   ├── RecordTooLargeError        a record above ``max_message_bytes`` or a batch above ``max_batch_bytes``
    │   ├── PartitionLimitError        a topic create would pass ``max_partitions`` (all topics together)
    │   ├── InvalidConfigError         a topic config Kafka does not know, or a value outside its type or range
    │   │   └── UnsupportedConfigError a known topic config (at that value) LKSTREAM cannot honour, and why
    │   ├── InvalidTimestampError      a record timestamp outside the topic's message.timestamp.*.max.ms
    │   ├── PolicyViolationError       DeleteRecords on a topic whose cleanup.policy has no ``delete``
    │   └── UnknownAssignorError       assignor not range / roundrobin / cooperative-sticky
    ├── UnknownTopicError              topic does not exist (and auto-create is off)
    ├── TopicExistsError               create_topic on an existing topic
    ├── OffsetOutOfRangeError          offset outside [log_start_offset, next_offset]
    ├── CorruptRecordError             a batch failed its length, magic or CRC check
    ├── BackpressureError              in-flight bytes above ``max_inflight_bytes`` (retriable)
    │   ├── OverloadedError            listeners hold ``max_admitted_bytes`` of requests: refused unread (retriable)
    │   ├── ProducerStateLimitError    ``max_producer_states`` producer states kept: a new producer waits (retriable)
    │   └── AutoCreateThrottledError   a caller auto-created topics faster than its budget (retriable)
    ├── StorageError                   an OS-level I/O failure, with the path
    │   ├── DiskFullError              ENOSPC / EDQUOT (retriable once space is freed)
    │   ├── TooManyOpenFilesError      EMFILE / ENFILE: the descriptor limit (retriable)
    │   └── StorageAccessError         EROFS / EACCES / EPERM: the data directory is not writable
    ├── DataDirLockedError             another broker holds the data directory
    ├── BrokerClosedError              the broker was closed
    ├── BrokerUnavailableError         a remote client cannot reach the daemon (retriable)
    ├── ProtocolVersionError           client and daemon speak incompatible protocol versions
    ├── OutOfOrderSequenceError        an idempotent producer's batch skips or repeats sequence numbers
    ├── ProducerFencedError            an idempotent producer's epoch is older than the partition's
    ├── AuthenticationError            missing or wrong credentials (never says which part was wrong)
    ├── AuthorizationError             the principal lacks a permission: names principal, operation, resource
    │   └── MemberOwnerError           a group member id used by a principal other than the one that joined with it
    └── GroupError                     a consumer-group call the coordinator refused (``group``)
        ├── UnknownMemberError         member id unknown (left or expired): join again
        │   └── FencedInstanceError    a static member's old id after a restart took its place
        ├── StaleGenerationError       the generation is no longer the member's (retriable)
        ├── RebalanceInProgressError   the assignment is not settled: heartbeat again (retriable)
        ├── NotPartitionOwnerError     commit for a partition the member does not own
        ├── InconsistentGroupProtocolError  the assignor differs from the group's
        ├── GroupNotEmptyError         operator action while the group has live members
        ├── UnknownGroupError          an operator action on a group with no members and no commits
        └── OffsetRegressionError      commit below the committed offset (operators reset)
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

    def __init__(self, size: int, limit: int, what: str = "message", setting: str | None = None) -> None:
        # The message names the setting to raise, so the fix is in the error (CLI, HTTP and gRPC alike).
        setting = setting or ("max_batch_bytes" if "batch" in what else "max_message_bytes")
        super().__init__(f"{what} of {size} bytes exceeds {setting} ({limit} bytes)")
        self.size = size
        self.limit = limit


def count_of(count: int, noun: str, plural: str = "") -> str:
    """``1 partition``, ``4 partitions``: a count with its noun in the right number, for messages."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def no_such_partition(topic: str, partition: object, count: int) -> InvalidArgumentError:
    """The one message every surface gives for a partition ``topic`` does not have."""
    return InvalidArgumentError(
        f"partition {partition!r} does not exist in {topic!r} (it has {count_of(count, 'partition')})"
    )


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


class OverloadedError(BackpressureError):
    """The daemon's listeners hold ``max_admitted_bytes`` of requests: this one was refused before it was decoded.

    Nothing was done, so a retry cannot duplicate anything; ``retry_after_ms`` says when
    to try again (HTTP: ``Retry-After``). ``admitted_bytes`` is what the listeners held,
    ``size`` what this request needed.
    """

    retriable = True

    def __init__(self, admitted_bytes: int, size: int, limit: int, retry_after_ms: int) -> None:
        refused = f"{size} more would exceed it" if size else "it takes no more record data until some are answered"
        LkstreamError.__init__(
            self,
            f"overloaded: the daemon holds {admitted_bytes} bytes of requests (max_admitted_bytes={limit}) and "
            f"{refused}; nothing was done, retry in {retry_after_ms} ms",
        )
        self.inflight_bytes = admitted_bytes
        self.admitted_bytes = admitted_bytes
        self.size = size
        self.limit = limit
        self.retry_after_ms = retry_after_ms


class ProducerStateLimitError(BackpressureError):
    """A new idempotent producer was refused: the broker keeps ``max_producer_states`` producer states.

    Each state (one per producer and partition) lives until ``producer_id_expiration_ms``
    after its producer's last write; none is forgotten earlier, so duplicates are always
    recognised within that window, and a producer the partition does not know waits for
    room. Nothing was written; retrying succeeds once states expire. ``limit`` is
    ``max_producer_states``.
    """

    retriable = True

    def __init__(self, limit: int, expiration_ms: int) -> None:
        LkstreamError.__init__(
            self,
            f"producer state limit reached: the broker remembers max_producer_states={limit} idempotent "
            f"producers, each for producer_id_expiration_ms={expiration_ms} after its last write; nothing was "
            "written, retry later (or raise max_producer_states)",
        )
        self.inflight_bytes = 0
        self.limit = limit
        self.expiration_ms = expiration_ms


class AutoCreateThrottledError(BackpressureError):
    """A topic was not auto-created: its caller auto-created topics faster than its budget allows.

    Each principal (or, without authentication, client address) may auto-create
    ``auto_create_partitions_burst`` partitions at once, refilled at
    ``auto_create_partitions_per_s``. Nothing was created; retry after ``retry_after_ms``, or
    create the topic explicitly. ``limit`` is the rate, ``burst`` the bucket size.
    """

    retriable = True

    def __init__(self, topic: str, rate_per_s: int, burst: int, retry_after_ms: int) -> None:
        LkstreamError.__init__(
            self,
            f"auto-creation of topic {topic!r} throttled: this caller auto-created topics faster than "
            f"auto_create_partitions_per_s={rate_per_s} (burst auto_create_partitions_burst={burst}); nothing was "
            f"created, retry in {retry_after_ms} ms or create the topic explicitly",
        )
        self.topic = topic
        self.inflight_bytes = 0
        self.limit = rate_per_s
        self.burst = burst
        self.retry_after_ms = retry_after_ms


class StorageError(LkstreamError):
    """The operating system refused an I/O operation."""

    def __init__(self, message: str, *, path: str | None = None, errno_: int | None = None) -> None:
        super().__init__(message if path is None else f"{message}: {path}")
        self.path = path
        self.errno = errno_


class DiskFullError(StorageError):
    """No space left on the device holding the data directory."""

    retriable = True


class TooManyOpenFilesError(StorageError):
    """The process (EMFILE) or the system (ENFILE) ran out of file descriptors.

    ``limit`` is the process's soft ``RLIMIT_NOFILE``. Retrying can help once
    connections close; raising the limit (``ulimit -n``, systemd ``LimitNOFILE``) or
    lowering ``max_open_files`` is the lasting fix.
    """

    retriable = True

    def __init__(self, message: str, *, path: str | None = None, errno_: int | None = None, limit: int = -1) -> None:
        super().__init__(message, path=path, errno_=errno_)
        self.limit = limit


class StorageAccessError(StorageError):
    """The data directory (or a file in it) is read-only or not writable by the broker (EROFS, EACCES, EPERM).

    Nothing was changed; an operator must fix the mount or the permissions of ``path``.
    """


class PartitionLimitError(InvalidArgumentError):
    """Creating the topic would take the broker past ``max_partitions`` (all topics together).

    Every surface says so as a limit reached, not as a bad argument: gRPC
    RESOURCE_EXHAUSTED, HTTP 507, Kafka POLICY_VIOLATION (issue 28, finding 6). It stays an
    :class:`InvalidArgumentError` for code that catches that.
    """

    def __init__(self, topic: str, requested: int, existing: int, limit: int) -> None:
        super().__init__(
            f"partition limit reached: cannot create topic {topic!r} with {requested} partition(s): the "
            f"broker has {existing} and max_partitions is {limit}; delete topics or raise max_partitions"
        )
        self.topic = topic
        self.requested = requested
        self.existing = existing
        self.limit = limit


class InvalidConfigError(InvalidArgumentError):
    """A topic config is not one Kafka knows, or its value is not of its type or range (nothing was changed).

    ``name`` is the config (``retention.ms``), ``value`` the string given (None when none was).
    Kafka's INVALID_CONFIG on the Kafka listener, INVALID_ARGUMENT on gRPC, HTTP 400.
    """

    def __init__(self, name: str, value: str | None, reason: str) -> None:
        super().__init__(f"invalid topic config {name}={value!r}: {reason}" if value is not None else reason)
        self.name = name
        self.value = value
        self.reason = reason


class PolicyViolationError(InvalidArgumentError):
    """The request goes against the topic's configured policy (Kafka's POLICY_VIOLATION); nothing changed.

    DeleteRecords on a topic whose ``cleanup.policy`` has no ``delete``: a compacted topic
    keeps the latest record of every key, so Kafka refuses to delete its records by offset.
    """


class UnsupportedConfigError(InvalidConfigError):
    """A topic config Kafka knows, at a value LKSTREAM cannot honour; the message says why (nothing was changed).

    LKSTREAM never accepts a config it would then ignore (docs/kafka.md lists what each one does here).
    """

    def __init__(self, name: str, value: str | None, why: str) -> None:
        InvalidArgumentError.__init__(self, f"LKSTREAM cannot honour topic config {name}={value!r}: {why}")
        self.name = name
        self.value = value
        self.reason = why


class InvalidTimestampError(InvalidArgumentError):
    """A record's timestamp is further from the broker's clock than the topic allows (Kafka's INVALID_TIMESTAMP).

    ``setting`` is ``message.timestamp.before.max.ms`` or ``message.timestamp.after.max.ms``.
    """

    def __init__(self, topic: str, timestamp_ms: int, now_ms: int, setting: str, limit_ms: int) -> None:
        super().__init__(
            f"record timestamp {timestamp_ms} is {abs(now_ms - timestamp_ms)} ms "
            f"{'before' if timestamp_ms < now_ms else 'after'} the broker's clock ({now_ms}); "
            f"topic {topic!r} allows {limit_ms} ms ({setting})"
        )
        self.topic = topic
        self.timestamp_ms = timestamp_ms
        self.setting = setting
        self.limit_ms = limit_ms


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


# -- access control (lkstream.security) --------------------------------------------------------


class AuthenticationError(LkstreamError):
    """The caller could not be authenticated: no credentials, or credentials that do not verify.

    The message never tells an unknown user from a wrong password or token.
    """

    def __init__(self, reason: str = "authentication failed") -> None:
        super().__init__(reason)
        self.reason = reason


class AuthorizationError(LkstreamError):
    """An authenticated principal lacks the permission a call needs (nothing was done)."""

    def __init__(self, principal: str, operation: str, resource_type: str, resource: str) -> None:
        target = "the cluster" if resource_type == "cluster" else f"{resource_type} {resource!r}"
        super().__init__(
            f"principal {principal!r} is not allowed to {operation} {target}: "
            f"an ACL must allow {operation} on {resource_type} {resource!r} (lkstream acls add)"
        )
        self.principal = principal
        self.operation = operation
        self.resource_type = resource_type
        self.resource = resource


class MemberOwnerError(AuthorizationError):
    """A principal acted with a group member id that another principal joined with (nothing was done).

    Member ids are visible to anyone who may describe the group; only the principal that
    joined may heartbeat, sync, commit, leave or rejoin with one (docs/security.md).
    """

    def __init__(self, group: str, member_id: str, principal: str) -> None:
        LkstreamError.__init__(
            self,
            f"principal {principal!r} may not act as member {member_id!r} of group {group!r}: "
            "another principal joined with that member id",
        )
        self.principal = principal
        self.operation = "act as member"
        self.resource_type = "group"
        self.resource = group
        self.group = group
        self.member_id = member_id


# -- consumer groups (lkstream.broker.groups) ---------------------------------------------------


class UnknownAssignorError(InvalidArgumentError):
    """The requested partition assignor does not exist."""

    def __init__(self, name: object, known: tuple[str, ...]) -> None:
        super().__init__(f"unknown partition assignor {name!r}: use one of {', '.join(known)}")
        self.name = name


class GroupError(LkstreamError):
    """A consumer-group call the coordinator refused; ``group`` names the group."""

    def __init__(self, group: str, message: str) -> None:
        super().__init__(message)
        self.group = group


class UnknownMemberError(GroupError):
    """The member id is not in the group (never joined, left, or expired): join again without it."""

    def __init__(self, group: str, member_id: str | None, reason: str = "") -> None:
        super().__init__(
            group,
            f"unknown member {member_id!r} of group {group!r}"
            + (f": {reason}" if reason else ": it left or missed its session timeout; join again"),
        )
        self.member_id = member_id


class FencedInstanceError(UnknownMemberError):
    """A newer process with the same static ``instance_id`` took over this member's identity."""

    def __init__(self, group: str, member_id: str, instance_id: str) -> None:
        super().__init__(
            group,
            member_id,
            f"fenced: static instance {instance_id!r} rejoined under a new member id; this process must stop",
        )
        self.instance_id = instance_id


class StaleGenerationError(GroupError):
    """The call carried a generation the member no longer holds (a rebalance happened since)."""

    retriable = True

    def __init__(self, group: str, member_id: str, given: int, current: int) -> None:
        super().__init__(
            group,
            f"stale generation {given} for member {member_id!r} of group {group!r}: its generation is {current}; "
            "heartbeat to learn the current generation and assignment, then retry",
        )
        self.member_id = member_id
        self.given = given
        self.current = current


class RebalanceInProgressError(GroupError):
    """The member's assignment is not settled yet: heartbeat (release what it was told to revoke) and retry."""

    retriable = True

    def __init__(self, group: str, member_id: str, generation: int) -> None:
        super().__init__(
            group,
            f"group {group!r} is rebalancing (generation {generation}): member {member_id!r} must heartbeat "
            "and release its revoked partitions before its assignment is stable",
        )
        self.member_id = member_id
        self.generation = generation


class NotPartitionOwnerError(GroupError):
    """A member committed offsets of partitions it does not own."""

    def __init__(self, group: str, member_id: str, partitions: list[tuple[str, int]]) -> None:
        shown = ", ".join(f"{t}[{p}]" for t, p in partitions[:8]) + (" ..." if len(partitions) > 8 else "")
        super().__init__(
            group,
            f"member {member_id!r} of group {group!r} does not own {shown}: the commit was not applied",
        )
        self.member_id = member_id
        self.partitions = partitions


class InconsistentGroupProtocolError(GroupError):
    """The joining member asks for another assignor than the group's live members use."""

    def __init__(self, group: str, requested: str, current: str) -> None:
        super().__init__(
            group,
            f"group {group!r} uses the {current!r} assignor; a member asking for {requested!r} cannot join "
            "(all members of a group must use the same assignor)",
        )
        self.requested = requested
        self.current = current


class GroupNotEmptyError(GroupError):
    """An operator action that needs an idle group met live members."""

    def __init__(self, group: str, members: int, action: str) -> None:
        super().__init__(
            group, f"cannot {action}: group {group!r} has {members} live member(s); stop its consumers first"
        )
        self.members = members


class UnknownGroupError(GroupError):
    """An operator action named a group neither coordinator knows (no members, no committed offsets)."""

    def __init__(self, group: str) -> None:
        super().__init__(group, f"group {group!r} does not exist (no members, no committed offsets)")


class GroupSubscribedToTopicError(GroupError):
    """Deleting a group's committed offset of a topic one of its live members subscribes to (Kafka's
    GROUP_SUBSCRIBED_TO_TOPIC): the member would lose its position under it."""

    def __init__(self, group: str, topic: str, partition: int) -> None:
        super().__init__(
            group,
            f"cannot delete the committed offset of {topic}[{partition}]: a live member of group {group!r} "
            "subscribes to the topic; stop it (or unsubscribe it) first",
        )
        self.topic = topic
        self.partition = partition


class OffsetRegressionError(GroupError):
    """A commit would move a committed offset backward."""

    def __init__(self, group: str, topic: str, partition: int, offset: int, committed: int) -> None:
        super().__init__(
            group,
            f"commit of offset {offset} for {topic}[{partition}] in group {group!r} would move the committed "
            f"offset {committed} backward; use an operator offset reset to rewind",
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.committed = committed


class InvalidSessionTimeoutError(InvalidArgumentError):
    """A join asked for a session timeout outside the broker's bounds (Kafka's INVALID_SESSION_TIMEOUT).

    The bounds are ``group_min_session_timeout_ms`` .. ``group_max_session_timeout_ms``
    (Kafka's ``group.min.session.timeout.ms``, 6 s, and ``group.max.session.timeout.ms``, 30 min).
    """

    def __init__(self, group: str, session_timeout_ms: int, low: int, high: int) -> None:
        super().__init__(
            f"session timeout {session_timeout_ms} ms for group {group!r} is outside the broker's bounds "
            f"{low}..{high} ms (group_min_session_timeout_ms .. group_max_session_timeout_ms)"
        )
        self.group = group
        self.size = session_timeout_ms
        self.limit = high


class GroupMaxSizeReachedError(GroupError):
    """The group, or all groups together, already hold as many members as the broker allows
    (Kafka's GROUP_MAX_SIZE_REACHED; ``group_max_size`` per group, ``max_group_members`` in all)."""

    def __init__(self, group: str, limit: int, scope: str) -> None:
        super().__init__(group, f"cannot join group {group!r}: {scope} already hold(s) {limit} member(s), the limit")
        self.limit = limit


class OffsetMetadataTooLargeError(InvalidArgumentError):
    """A commit's metadata string is longer than ``offset_metadata_max_bytes`` (Kafka's OFFSET_METADATA_TOO_LARGE)."""

    def __init__(self, group: str, topic: str, partition: int, size: int, limit: int) -> None:
        super().__init__(
            f"commit metadata of {size} characters for {topic}[{partition}] in group {group!r} is longer than "
            f"offset_metadata_max_bytes ({limit}): the offset was not committed"
        )
        self.group = group
        self.topic = topic
        self.partition = partition
        self.size = size
        self.limit = limit


class OutOfOrderSequenceError(LkstreamError):
    """An idempotent producer's batch does not continue its sequence (Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER)."""

    def __init__(self, producer_id: int, sequence: int, expected: int) -> None:
        super().__init__(f"producer {producer_id}: batch sequence {sequence} is out of order, expected {expected}")
        self.producer_id = producer_id
        self.sequence = sequence
        self.expected = expected


class ProducerFencedError(LkstreamError):
    """An idempotent producer wrote with an epoch older than one the partition saw (a zombie)."""

    def __init__(self, producer_id: int, epoch: int, current_epoch: int) -> None:
        super().__init__(f"producer {producer_id}: epoch {epoch} is fenced by epoch {current_epoch}")
        self.producer_id = producer_id
        self.epoch = epoch
        self.current_epoch = current_epoch


class InvariantViolation(AssertionError):
    """An internal invariant broke: a bug, never a user error."""


def invariant(condition: bool, message: str) -> None:
    """Check an invariant that must hold even under ``python -O``."""
    if not condition:
        raise InvariantViolation(message)


_DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_DESCRIPTOR_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})
_ACCESS_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def _descriptor_limit() -> int:
    import resource  # here: errors.py is imported everywhere, resource only matters on this path

    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def os_error(action: str, path: str, exc: OSError) -> StorageError:
    """The :class:`StorageError` (or subclass) for ``exc`` raised while trying to ``action`` ``path``."""
    if exc.errno in _DISK_FULL_ERRNOS:
        return DiskFullError(f"disk full while trying to {action}", path=path, errno_=exc.errno)
    if exc.errno in _DESCRIPTOR_ERRNOS:
        limit = _descriptor_limit()
        return TooManyOpenFilesError(
            f"cannot {action}: too many open files (RLIMIT_NOFILE is {limit}; raise it with ulimit -n or "
            "LimitNOFILE, or lower max_open_files)",
            path=path,
            errno_=exc.errno,
            limit=limit,
        )
    if exc.errno in _ACCESS_ERRNOS:
        return StorageAccessError(
            f"cannot {action}: the data directory is not writable ({exc.strerror})", path=path, errno_=exc.errno
        )
    return StorageError(f"cannot {action} ({exc.strerror})", path=path, errno_=exc.errno)


@contextmanager
def map_os_errors(action: str, path: str) -> Iterator[None]:
    """Turn ``OSError`` raised inside the block into :class:`StorageError` (see :func:`os_error`)."""
    try:
        yield
    except OSError as exc:
        raise os_error(action, path, exc) from exc
