"""The broker's open topics and what it reports about them.

:class:`OpenTopic` is one entry of the broker's copy-on-write topic table;
:class:`TopicDescription` is what ``describe_topic`` answers (embedded and remote alike).
Imports storage only.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Final

from lkstream.broker.partition_table import PartitionTable
from lkstream.storage.log import PartitionStats
from lkstream.storage.topic_config import NO_OVERRIDES, EffectiveTopicConfig, TopicConfig
from lkstream.storage.topics import TopicSettings

#: Kafka's "no topic id" (all zeros): what a description without a known id carries.
NIL_TOPIC_ID: Final = uuid.UUID(int=0)


@dataclass(frozen=True)
class TopicDescription:
    """A topic's settings and per-partition stats.

    ``topic_id`` names this incarnation of the topic (``topic.json``, issue 12): it
    never changes while the topic exists, and a topic deleted and created again
    gets a new one (Kafka's topic id of Metadata v10+ and Fetch v13+). A
    :class:`~lkstream.client.remote.RemoteBroker` reports the nil UUID, as Kafka
    does for "unknown": the gRPC contract does not carry it yet.
    """

    name: str
    settings: TopicSettings
    partitions: list[PartitionStats]
    topic_id: uuid.UUID = NIL_TOPIC_ID
    #: The topic's config overrides (Kafka's names); what applies is :meth:`Broker.topic_config`.
    configs: TopicConfig = NO_OVERRIDES


class OpenTopic:
    """A topic the broker has open: its configs, id and partition table (replaced whole on alter)."""

    def __init__(self, name: str, configs: TopicConfig, effective: EffectiveTopicConfig, topic_id: uuid.UUID) -> None:
        self.name = name
        self.configs = configs
        #: Replaced whole by an alter (never changed in place), so a reader sees one version or the other.
        self.effective = effective
        self.partitions: PartitionTable
        self.topic_id = topic_id
        self._routes: dict[Any, int] = {}
        self._routes_for = 0

    @property
    def settings(self) -> TopicSettings:
        # Any negative retention.bytes means "no limit" (Kafka's); TopicSettings spells it -1.
        retention_bytes = max(-1, self.effective.retention_bytes)
        return TopicSettings(len(self.partitions), self.effective.retention_ms, retention_bytes)

    def route_cache(self, partitions: int) -> dict[Any, int]:
        """Keys seen by the produce fast path and their partitions, valid for ``partitions`` partitions."""
        if self._routes_for != partitions:
            self._routes, self._routes_for = {}, partitions
        return self._routes
