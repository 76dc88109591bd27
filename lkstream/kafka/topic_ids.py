"""Kafka topic ids (UUIDs) for LKSTREAM topics, behind the listener's topic-id switch.

Kafka gives every topic incarnation a random id; newer protocol versions name topics by id
(Metadata v10+ reports them, KIP-848's ConsumerGroupHeartbeat assigns partitions by id, Fetch and
Produce v13+ address topics by id). A client that sees a topic's id change knows the topic was
deleted and recreated under the same name.

LKSTREAM does not persist topic ids yet (persisted ids, ``TopicDescription.topic_id``, are the
hardening work's), so ``ListenerSettings.topic_ids`` is off by default and every API stays
below its topic-id versions. With the switch on, an id is the persisted one when the broker has
it, else derived from the name (UUID v5): stable across restarts, but the same for a topic
recreated under the same name, which is what the name-based versions promise and not what
Kafka's ids promise. That is why the switch stays off until persisted ids are merged.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from lkstream.broker.broker import Broker

#: Namespace of name-derived ids (fixed: the same name gives the same id on every node and restart).
NAME_NAMESPACE: Final = uuid.UUID("6f1c2a3e-8d47-5b6a-9c0e-1f2d3c4b5a69")


class TopicIds:
    """Topic name <-> id for one broker, recomputed whenever a topic is created or deleted.

    Not thread-safe: used from the listener's event loop only.
    """

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._version = -1
        self._by_name: dict[str, uuid.UUID] = {}
        self._by_id: dict[uuid.UUID, str] = {}

    def id_of(self, name: str) -> uuid.UUID:
        self._refresh()
        found = self._by_name.get(name)
        return found if found is not None else _derived(name)

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        """The topic with this id, or None (unknown, or deleted)."""
        self._refresh()
        return self._by_id.get(topic_id)

    def _refresh(self) -> None:
        version = self._broker.topics_version
        if version == self._version:
            return
        by_name = {}
        for name in self._broker.list_topics():
            persisted = getattr(self._broker.describe_topic(name), "topic_id", None)
            by_name[name] = persisted if isinstance(persisted, uuid.UUID) else _derived(name)
        self._by_name = by_name
        self._by_id = {topic_id: name for name, topic_id in by_name.items()}
        self._version = version


def _derived(name: str) -> uuid.UUID:
    return uuid.uuid5(NAME_NAMESPACE, name)
