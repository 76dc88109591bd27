"""``GroupLimits``: the bounds (and the conversion policy) of both group coordinators (BrokerConfig's group keys).

Kafka's own bounds (``group.min.session.timeout.ms``, ``group.max.session.timeout.ms``,
``group.max.size``, ``offset.metadata.max.bytes``) with Kafka's defaults, and one LKSTREAM
adds: ``max_members``, the members of all groups together (joined, or holding a member id
handed out by MEMBER_ID_REQUIRED), so that a flood of joins under many group names cannot
grow the coordinators without end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from lkstream.errors import InvalidSessionTimeoutError, OffsetMetadataTooLargeError

if TYPE_CHECKING:
    from lkstream.config import BrokerConfig

#: Kafka's defaults.
MIN_SESSION_TIMEOUT_MS = 6_000
MAX_SESSION_TIMEOUT_MS = 1_800_000
MAX_GROUP_SIZE = 2**31 - 1
OFFSET_METADATA_MAX_BYTES = 4096
#: LKSTREAM's bound on the members of all groups together.
MAX_MEMBERS = 100_000


@dataclass(frozen=True)
class GroupLimits:
    """The bounds a coordinator enforces; the defaults are BrokerConfig's (Kafka's where Kafka has one)."""

    min_session_timeout_ms: int = MIN_SESSION_TIMEOUT_MS
    max_session_timeout_ms: int = MAX_SESSION_TIMEOUT_MS
    max_group_size: int = MAX_GROUP_SIZE
    max_members: int = MAX_MEMBERS
    offset_metadata_max_bytes: int = OFFSET_METADATA_MAX_BYTES
    #: Kafka's ``group.consumer.migration.policy`` (:mod:`lkstream.broker.groups.conversion`).
    migration_policy: Literal["bidirectional", "upgrade", "downgrade", "disabled"] = "bidirectional"

    @classmethod
    def from_config(cls, config: BrokerConfig) -> GroupLimits:
        return cls(
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            max_group_size=config.group_max_size,
            max_members=config.max_group_members,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            migration_policy=config.group_consumer_migration_policy,
        )

    def check_session_timeout(self, group: str, session_timeout_ms: int) -> None:
        """Refuse a session timeout outside the bounds (Kafka's INVALID_SESSION_TIMEOUT)."""
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            raise InvalidSessionTimeoutError(
                group, session_timeout_ms, self.min_session_timeout_ms, self.max_session_timeout_ms
            )

    def check_metadata(self, group: str, topic: str, partition: int, metadata: str) -> None:
        """Refuse commit metadata longer than the limit; Kafka measures Java characters (UTF-16 units)."""
        limit = self.offset_metadata_max_bytes
        if len(metadata) <= limit // 2:
            return  # at most two UTF-16 units per character: short enough whatever it holds
        units = len(metadata.encode("utf-16-le", "surrogatepass")) // 2
        if units > limit:
            raise OffsetMetadataTooLargeError(group, topic, partition, units, limit)
