"""Consumer groups: the coordinator (membership, assignment, fenced commits) and its assignors.

See :mod:`lkstream.broker.groups.coordinator` for the protocol and docs/groups.md for the overview.
"""

from lkstream.broker.groups.assignors import ASSIGNORS, EAGER_ASSIGNORS, get_assignor
from lkstream.broker.groups.coordinator import GroupCoordinator
from lkstream.broker.groups.errors import (
    FencedInstanceError,
    GroupError,
    GroupNotEmptyError,
    InconsistentGroupProtocolError,
    NotPartitionOwnerError,
    OffsetRegressionError,
    RebalanceInProgressError,
    StaleGenerationError,
    UnknownAssignorError,
    UnknownMemberError,
)
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
    "GroupListing",
    "GroupNotEmptyError",
    "GroupState",
    "HeartbeatResult",
    "InconsistentGroupProtocolError",
    "JoinResult",
    "MemberDescription",
    "NotPartitionOwnerError",
    "OffsetRegressionError",
    "RebalanceInProgressError",
    "StaleGenerationError",
    "SyncResult",
    "TopicPartition",
    "UnknownAssignorError",
    "UnknownMemberError",
    "get_assignor",
]
