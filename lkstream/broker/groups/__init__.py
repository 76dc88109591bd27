"""Consumer groups: the coordinator (membership, assignment, fenced commits) and its assignors.

See :mod:`lkstream.broker.groups.coordinator` for the protocol and docs/groups.md for the overview.
"""

from lkstream.broker.groups.assignors import ASSIGNORS, EAGER_ASSIGNORS, get_assignor
from lkstream.broker.groups.coordinator import GroupCoordinator
from lkstream.broker.groups.errors import (
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
from lkstream.broker.groups.limits import GroupLimits
from lkstream.broker.groups.notify import GroupChanged
from lkstream.broker.groups.types import (
    GroupDescription,
    GroupListing,
    GroupState,
    HeartbeatResult,
    JoinResult,
    MemberDescription,
    SyncResult,
    TopicPartition,
)

__all__ = [
    "ASSIGNORS",
    "EAGER_ASSIGNORS",
    "FencedInstanceError",
    "GroupChanged",
    "GroupCoordinator",
    "GroupDescription",
    "GroupError",
    "GroupLimits",
    "GroupListing",
    "GroupMaxSizeReachedError",
    "GroupNotEmptyError",
    "GroupState",
    "HeartbeatResult",
    "InconsistentGroupProtocolError",
    "InvalidSessionTimeoutError",
    "JoinResult",
    "MemberDescription",
    "NotPartitionOwnerError",
    "OffsetMetadataTooLargeError",
    "OffsetRegressionError",
    "RebalanceInProgressError",
    "StaleGenerationError",
    "SyncResult",
    "TopicPartition",
    "UnknownAssignorError",
    "UnknownMemberError",
    "get_assignor",
]
