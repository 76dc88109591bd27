"""Kafka topic ids (UUIDs) of LKSTREAM topics, for the topic-id protocol versions.

Kafka gives every topic incarnation an id; newer protocol versions name topics by it (Metadata
v10+ reports it and accepts it in place of a name, KIP-848's ConsumerGroupHeartbeat assigns
partitions by it). A client that sees a topic's id change knows the topic was deleted and created
again under the same name. LKSTREAM persists one per incarnation (``topic.json``,
:meth:`lkstream.Broker.topic_ids`), so the ids served here are the same on every connection and
after restarts, and a recreated topic gets a new one, as in Kafka.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lkstream.broker.broker import Broker


class TopicIds:
    """Topic name <-> id for one broker, reloaded whenever a topic is created or deleted.

    Not thread-safe: used from the listener's event loop only.
    """

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._version = -1
        self._by_name: dict[str, uuid.UUID] = {}
        self._by_id: dict[uuid.UUID, str] = {}

    def id_of(self, name: str) -> uuid.UUID:
        """The topic's id; the nil UUID (Kafka's "no id") for a topic that does not exist."""
        self._refresh()
        return self._by_name.get(name, NIL)

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        """The topic with this id, or None (unknown, or an earlier incarnation that was deleted)."""
        self._refresh()
        return self._by_id.get(topic_id)

    def _refresh(self) -> None:
        version = self._broker.topics_version
        if version != self._version:
            self._by_name = self._broker.topic_ids()
            self._by_id = {topic_id: name for name, topic_id in self._by_name.items()}
            self._version = version


NIL = uuid.UUID(int=0)
