"""KIP-848's group conversion: a group moves between the classic coordinator and the consumer one.

Kafka 4 (``GroupMetadataManager``, policy ``group.consumer.migration.policy``, default
``bidirectional``) converts a group while its members change protocol one by one, so a
rolling restart of consumers from ``group.protocol=classic`` to ``consumer`` (or back) never
stops the group:

* **Upgrade** (``validateOnlineUpgrade``): a consumer-protocol member joins a group that
  classic members hold. If the policy allows upgrades and every classic member speaks the
  consumer embedded protocol (protocol type ``consumer``), the group becomes a consumer
  group: every classic member keeps its current assignment and goes on with the classic
  protocol (:mod:`lkstream.broker.groups.classic_members`); their pending JoinGroup and
  SyncGroup calls are answered REBALANCE_IN_PROGRESS. Otherwise the joiner hears
  GROUP_ID_NOT_FOUND ("Group ... is not a consumer group"), Kafka's answer.
* **Classic joins into a consumer group**: a classic JoinGroup into a group with
  consumer-protocol members joins it as a classic member (whatever the policy, as Kafka).
* **Downgrade** (``validateOnlineDowngradeWithFencedMember``): when the last
  consumer-protocol member leaves or expires and classic members remain, and the policy
  allows downgrades, the group becomes a classic group again: its members keep their
  target assignment, and a rebalance starts (they rejoin on their next heartbeat).
* An empty group of one kind is simply replaced by the other.

Lock order: the classic coordinator's lock, then the consumer coordinator's (the classic one
calls into the other under its own lock, never the other way round).
"""

from __future__ import annotations

from typing import Literal

from lkstream.broker.groups.classic import ClassicGroups
from lkstream.broker.groups.coordinator import GroupCoordinator
from lkstream.errors import GroupError

MigrationPolicy = Literal["bidirectional", "upgrade", "downgrade", "disabled"]


class NotUpgradableError(GroupError):
    """Kafka's answer to a consumer-protocol join it cannot convert the classic group for
    (GROUP_ID_NOT_FOUND: "Group ... is not a consumer group")."""

    def __init__(self, group: str, reason: str) -> None:
        super().__init__(group, f"group {group!r} is not a consumer group ({reason})")


def upgrade_if_classic(
    classic: ClassicGroups, coordinator: GroupCoordinator, group: str, assignor: str, policy: MigrationPolicy
) -> bool:
    """Before a consumer-protocol member joins ``group``: convert a live classic group (see above).

    Returns whether a conversion happened; raises :class:`NotUpgradableError` when the group is a
    live classic one that may not be converted.
    """
    if not classic.has_members(group):
        return False
    if policy not in ("upgrade", "bidirectional"):
        raise NotUpgradableError(group, "online upgrade is disabled (group_consumer_migration_policy)")
    return classic.hand_over(group, coordinator, assignor)


def run_downgrades(classic: ClassicGroups, coordinator: GroupCoordinator, policy: MigrationPolicy) -> list[str]:
    """Hand back every group whose last consumer-protocol member went (see above); returns their names."""
    candidates = coordinator.take_downgradable()
    if policy not in ("downgrade", "bidirectional"):
        return []
    return [group for group in candidates if classic.take_over(group, coordinator)]
