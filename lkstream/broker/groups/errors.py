"""The coordinator's errors, re-exported: they live in :mod:`lkstream.errors`, the one hierarchy."""

from lkstream.errors import (
    FencedInstanceError,
    GroupError,
    GroupMaxSizeReachedError,
    GroupNotEmptyError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    NotPartitionOwnerError,
    OffsetMetadataTooLargeError,
    OffsetRegressionError,
    RebalanceInProgressError,
    StaleGenerationError,
    UnknownAssignorError,
    UnknownMemberError,
)

__all__ = [
    "FencedInstanceError",
    "GroupError",
    "GroupMaxSizeReachedError",
    "GroupNotEmptyError",
    "InconsistentGroupProtocolError",
    "InvalidSessionTimeoutError",
    "NotPartitionOwnerError",
    "OffsetMetadataTooLargeError",
    "OffsetRegressionError",
    "RebalanceInProgressError",
    "StaleGenerationError",
    "UnknownAssignorError",
    "UnknownMemberError",
]
