"""The wire contract shared by the gRPC server and the remote client.

One place says which gRPC status code each :mod:`lkstream.errors` class
travels as, how its fields ride along (trailing metadata ``lkstream-error``
naming the class and ``lkstream-error-detail`` holding its fields as JSON),
and which protocol versions the two ends speak. The server encodes with
:func:`status_for`/:func:`error_metadata`; the client decodes with
:func:`error_from_status`. Neither module duplicates the table.

This module imports no server machinery, so ``lkstream.client.remote`` may
use it (see the import contracts in ``pyproject.toml``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

import grpc

from lkstream.errors import (
    AuthenticationError,
    AuthorizationError,
    AutoCreateThrottledError,
    BackpressureError,
    BrokerClosedError,
    BrokerUnavailableError,
    CorruptRecordError,
    DataDirLockedError,
    DiskFullError,
    FencedInstanceError,
    GroupError,
    GroupMaxSizeReachedError,
    GroupNotEmptyError,
    GroupSubscribedToTopicError,
    InconsistentGroupProtocolError,
    InvalidArgumentError,
    InvalidSessionTimeoutError,
    LkstreamError,
    MemberOwnerError,
    NotPartitionOwnerError,
    OffsetMetadataTooLargeError,
    OffsetOutOfRangeError,
    OffsetRegressionError,
    OutOfOrderSequenceError,
    OverloadedError,
    PartitionLimitError,
    ProducerFencedError,
    ProducerStateLimitError,
    ProtocolVersionError,
    RebalanceInProgressError,
    RecordTooLargeError,
    StaleGenerationError,
    StorageAccessError,
    StorageError,
    TooManyOpenFilesError,
    TopicExistsError,
    UnknownGroupError,
    UnknownMemberError,
    UnknownTopicError,
)

#: The protocol version this code speaks, and the oldest client version the server accepts.
PROTOCOL_VERSION: Final = 1
MIN_CLIENT_PROTOCOL_VERSION: Final = 1
#: Request metadata key carrying the client's protocol version on any call.
VERSION_METADATA_KEY: Final = "lkstream-protocol-version"
ERROR_CLASS_KEY: Final = "lkstream-error"
ERROR_DETAIL_KEY: Final = "lkstream-error-detail"
#: A unary Produce's request size, stated by the client so the daemon admits the call by it before reading it.
REQUEST_BYTES_KEY: Final = "lk-request-bytes"

Code = grpc.StatusCode

#: Most specific class first: the first ``isinstance`` match wins.
ERROR_CODES: Final[Sequence[tuple[type[LkstreamError], grpc.StatusCode]]] = (
    (RecordTooLargeError, Code.INVALID_ARGUMENT),
    (PartitionLimitError, Code.RESOURCE_EXHAUSTED),  # a limit reached, not a bad argument (issue 28)
    (InvalidSessionTimeoutError, Code.INVALID_ARGUMENT),
    (OffsetMetadataTooLargeError, Code.INVALID_ARGUMENT),
    (InvalidArgumentError, Code.INVALID_ARGUMENT),
    (UnknownTopicError, Code.NOT_FOUND),
    (TopicExistsError, Code.ALREADY_EXISTS),
    (OffsetOutOfRangeError, Code.OUT_OF_RANGE),
    (OverloadedError, Code.RESOURCE_EXHAUSTED),  # refused before it was decoded: retry after retry_after_ms
    (ProducerStateLimitError, Code.RESOURCE_EXHAUSTED),  # a new idempotent producer waits for states to expire
    (AutoCreateThrottledError, Code.RESOURCE_EXHAUSTED),  # retry after retry_after_ms, or create it explicitly
    (BackpressureError, Code.RESOURCE_EXHAUSTED),
    (DiskFullError, Code.RESOURCE_EXHAUSTED),
    (TooManyOpenFilesError, Code.RESOURCE_EXHAUSTED),
    (CorruptRecordError, Code.DATA_LOSS),
    # Not INTERNAL: the broker works, its directory does not accept writes; the message names the path.
    (StorageAccessError, Code.FAILED_PRECONDITION),
    (StorageError, Code.INTERNAL),
    (BrokerClosedError, Code.UNAVAILABLE),
    (BrokerUnavailableError, Code.UNAVAILABLE),
    (ProtocolVersionError, Code.FAILED_PRECONDITION),
    (DataDirLockedError, Code.FAILED_PRECONDITION),
    # Idempotent producers (pre-encoded batches with a producer id): the batch was not appended.
    (OutOfOrderSequenceError, Code.FAILED_PRECONDITION),
    (ProducerFencedError, Code.FAILED_PRECONDITION),
    (AuthenticationError, Code.UNAUTHENTICATED),
    (MemberOwnerError, Code.PERMISSION_DENIED),
    (AuthorizationError, Code.PERMISSION_DENIED),
    # Consumer groups: retriable refusals are ABORTED, "this member must rejoin" NOT_FOUND.
    (FencedInstanceError, Code.FAILED_PRECONDITION),
    (UnknownMemberError, Code.NOT_FOUND),
    (StaleGenerationError, Code.ABORTED),
    (RebalanceInProgressError, Code.ABORTED),
    (NotPartitionOwnerError, Code.FAILED_PRECONDITION),
    (InconsistentGroupProtocolError, Code.FAILED_PRECONDITION),
    (GroupNotEmptyError, Code.FAILED_PRECONDITION),
    (GroupSubscribedToTopicError, Code.FAILED_PRECONDITION),
    (GroupMaxSizeReachedError, Code.RESOURCE_EXHAUSTED),
    (UnknownGroupError, Code.NOT_FOUND),
    (OffsetRegressionError, Code.FAILED_PRECONDITION),
    (GroupError, Code.FAILED_PRECONDITION),  # any other refusal of the coordinator
)

_BY_NAME: Final = {cls.__name__: cls for cls, _ in ERROR_CODES}

#: What a status without LKSTREAM metadata (a gRPC-level failure) becomes on the client.
_FALLBACK: Final[dict[grpc.StatusCode, type[LkstreamError]]] = {
    Code.INVALID_ARGUMENT: InvalidArgumentError,
    Code.NOT_FOUND: UnknownTopicError,
    Code.ALREADY_EXISTS: TopicExistsError,
    Code.OUT_OF_RANGE: OffsetOutOfRangeError,
    Code.RESOURCE_EXHAUSTED: BackpressureError,
    Code.DATA_LOSS: CorruptRecordError,
    Code.UNAVAILABLE: BrokerUnavailableError,
    Code.DEADLINE_EXCEEDED: BrokerUnavailableError,
    Code.FAILED_PRECONDITION: ProtocolVersionError,
    Code.UNAUTHENTICATED: AuthenticationError,
    Code.PERMISSION_DENIED: AuthorizationError,
}

# Attributes copied across the wire when present on the error.
_FIELDS: Final = (
    "topic",
    "partition",
    "offset",
    "earliest",
    "latest",
    "size",
    "limit",
    "inflight_bytes",
    "path",
    "position",
    "reason",
    "client_version",
    "server_version",
    "group",
    "member_id",
    "instance_id",
    "generation",
    "given",
    "current",
    "requested",
    "members",
    "committed",
    "partitions",
    "principal",
    "operation",
    "resource_type",
    "resource",
    "errno",
    "requested",
    "existing",
    "retry_after_ms",
    "admitted_bytes",
    "burst",
)


def status_for(error: LkstreamError) -> grpc.StatusCode:
    """The status code ``error`` travels as (INTERNAL for an unlisted class)."""
    for cls, code in ERROR_CODES:
        if isinstance(error, cls):
            return code
    return Code.INTERNAL


def error_metadata(error: LkstreamError) -> tuple[tuple[str, str], ...]:
    """Trailing metadata that lets the client rebuild ``error`` with its fields."""
    detail = {name: getattr(error, name) for name in _FIELDS if hasattr(error, name)}
    return ((ERROR_CLASS_KEY, type(error).__name__), (ERROR_DETAIL_KEY, json.dumps(detail, default=str)))


def error_from_status(
    code: grpc.StatusCode, message: str, metadata: Sequence[tuple[str, str | bytes]], address: str
) -> LkstreamError:
    """Rebuild the :class:`LkstreamError` a server sent (or describe a transport failure)."""
    values = {key: value for key, value in metadata}
    cls = _BY_NAME.get(str(values.get(ERROR_CLASS_KEY, "")))
    if cls is None:
        if code in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED):
            return BrokerUnavailableError(address, message)
        if code is Code.RESOURCE_EXHAUSTED and "larger than max" in message:
            cls = RecordTooLargeError  # gRPC's own message-size limit
        else:
            cls = _FALLBACK.get(code, LkstreamError)
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    raw = values.get(ERROR_DETAIL_KEY)
    if raw:
        try:
            detail = json.loads(raw)
        except ValueError:
            detail = {}
        if isinstance(detail, dict):
            for name, value in detail.items():
                if name in _FIELDS:
                    setattr(error, name, value)
    if isinstance(error, BrokerUnavailableError) and not hasattr(error, "address"):
        error.address = address
    return error


def check_client_version(version: int) -> None:
    """Raise :class:`ProtocolVersionError` unless the server accepts ``version``."""
    if not MIN_CLIENT_PROTOCOL_VERSION <= version <= PROTOCOL_VERSION:
        raise ProtocolVersionError(version, PROTOCOL_VERSION, MIN_CLIENT_PROTOCOL_VERSION)
