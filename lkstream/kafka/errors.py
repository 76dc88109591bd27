"""LKSTREAM errors as Kafka error codes: the one table the Kafka surface answers with.

Kafka clients decide from the code whether to retry (``retriable`` codes such
as REQUEST_TIMED_OUT), refresh metadata, rejoin a group, or give up; the
mapping keeps LKSTREAM's meaning (:class:`~lkstream.errors.BackpressureError`
is retriable, so it becomes a retriable code).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from kio.schema.errors import ErrorCode

from lkstream.errors import (
    AutoCreateThrottledError,
    BackpressureError,
    BrokerClosedError,
    CorruptRecordError,
    FencedInstanceError,
    GroupMaxSizeReachedError,
    GroupNotEmptyError,
    GroupSubscribedToTopicError,
    InconsistentGroupProtocolError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidSessionTimeoutError,
    InvalidTimestampError,
    LkstreamError,
    MemberOwnerError,
    NotPartitionOwnerError,
    OffsetMetadataTooLargeError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    PartitionLimitError,
    PolicyViolationError,
    ProducerFencedError,
    RebalanceInProgressError,
    RecordTooLargeError,
    StaleGenerationError,
    StorageError,
    TopicExistsError,
    UnknownGroupError,
    UnknownMemberError,
    UnknownTopicError,
)

#: Most specific class first: the first ``isinstance`` match wins.
ERROR_CODES: Final[Sequence[tuple[type[LkstreamError], ErrorCode]]] = (
    (RecordTooLargeError, ErrorCode.message_too_large),
    # Limits reached, not bad requests (issue 28, finding 6): a clear refusal a client can report.
    (PartitionLimitError, ErrorCode.policy_violation),
    (AutoCreateThrottledError, ErrorCode.throttling_quota_exceeded),
    (UnknownTopicError, ErrorCode.unknown_topic_or_partition),
    (TopicExistsError, ErrorCode.topic_already_exists),
    (OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (CorruptRecordError, ErrorCode.corrupt_message),
    (BackpressureError, ErrorCode.request_timed_out),
    (StorageError, ErrorCode.kafka_storage_error),
    (BrokerClosedError, ErrorCode.leader_not_available),
    (OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (ProducerFencedError, ErrorCode.invalid_producer_epoch),
    (MemberOwnerError, ErrorCode.group_authorization_failed),
    (FencedInstanceError, ErrorCode.fenced_instance_id),
    (UnknownMemberError, ErrorCode.unknown_member_id),
    (StaleGenerationError, ErrorCode.illegal_generation),
    (RebalanceInProgressError, ErrorCode.rebalance_in_progress),
    (NotPartitionOwnerError, ErrorCode.illegal_generation),
    (InconsistentGroupProtocolError, ErrorCode.inconsistent_group_protocol),
    (GroupNotEmptyError, ErrorCode.non_empty_group),
    (GroupSubscribedToTopicError, ErrorCode.group_subscribed_to_topic),
    (UnknownGroupError, ErrorCode.group_id_not_found),
    (InvalidConfigError, ErrorCode.invalid_config),
    (PolicyViolationError, ErrorCode.policy_violation),
    (InvalidTimestampError, ErrorCode.invalid_timestamp),
    (GroupMaxSizeReachedError, ErrorCode.group_max_size_reached),
    (InvalidSessionTimeoutError, ErrorCode.invalid_session_timeout),
    (OffsetMetadataTooLargeError, ErrorCode.offset_metadata_too_large),
    (InvalidArgumentError, ErrorCode.invalid_request),
)


def error_code(error: BaseException) -> ErrorCode:
    """The Kafka error code for ``error`` (UNKNOWN_SERVER_ERROR for anything unexpected)."""
    for cls, code in ERROR_CODES:
        if isinstance(error, cls):
            return code
    return ErrorCode.unknown_server_error
