"""Topic ids and offset incarnations (issue 12, finding 6).

``topic.json`` holds a ``topic_id`` (a UUID) written with the topic; committed offsets carry it,
so a topic created again under a deleted one's name never inherits that one's offsets, even when
forgetting them failed. ``TopicDescription.topic_id`` exposes it (Kafka's Metadata v10+/Fetch v13+).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from lkstream import Broker, Consumer, LkstreamError
from lkstream.storage.offsets import OffsetStore


def test_a_topic_keeps_its_id_across_restarts_and_a_new_incarnation_gets_a_new_one(tmp_path: Path) -> None:
    data = str(tmp_path / "d")
    with Broker(persist_dir=data) as broker:
        broker.create_topic("t", 2)
        first = broker.describe_topic("t").topic_id
        assert isinstance(first, uuid.UUID) and first.version == 4
        meta = json.loads((tmp_path / "d" / "topics" / "t" / "topic.json").read_text())
        assert meta["topic_id"] == first.hex
    with Broker(persist_dir=data) as broker:
        assert broker.describe_topic("t").topic_id == first == broker.topic_id("t")
        broker.delete_topic("t")
        broker.create_topic("t", 2)
        assert broker.topic_id("t") != first


def test_a_topic_json_from_before_topic_ids_gets_one_and_keeps_its_offsets(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with Broker(persist_dir=str(data)) as broker:
        broker.produce_many_sync("t", [(None, b"a"), (None, b"b")])
    meta = data / "topics" / "t" / "topic.json"
    legacy = {k: v for k, v in json.loads(meta.read_text()).items() if k != "topic_id"}
    meta.write_text(json.dumps(legacy))
    with OffsetStore(str(data)) as store:  # an offset written before ids: no topic id in it
        store.commit("g", "t", 0, 1)
    with Broker(persist_dir=str(data)) as broker:
        topic_id = broker.topic_id("t")
        assert json.loads(meta.read_text())["topic_id"] == topic_id.hex
        assert broker.groups.fetch_committed("g") == {("t", 0): 1}
    with OffsetStore(str(data), read_only=True) as store:  # stamped with the topic's id at open
        assert store.read_committed("g", "t", 0, topic_id=topic_id) == 1
        assert store.read_committed("g", "t", 0, topic_id=uuid.uuid4()) is None


def test_offsets_of_a_deleted_incarnation_are_never_read_even_if_forgetting_them_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Broker(persist_dir=str(tmp_path / "d")) as broker:
        broker.produce_many_sync("t", [(None, f"old-{n}".encode()) for n in range(5)])
        broker.commit_offsets("g", {("t", 0): 5})

        def broken(topic: str) -> int:
            raise LkstreamError("the offsets journal refused the write")

        monkeypatch.setattr(broker.offset_store, "forget_topic", broken)
        broker.delete_topic("t")  # the delete stands (its commit point is the rename); the failure is logged
        assert broker.list_topics() == []
        monkeypatch.undo()
        broker.produce_many_sync("t", [(None, b"new-0"), (None, b"new-1")])  # auto-created again
        assert broker.groups.fetch_committed("g") == {}
        assert broker.list_committed() == {}
        consumer = Consumer(broker, group="g", auto_commit=False)
        consumer.subscribe("t")
        assert [r.value for r in consumer.poll(timeout=5)] == [b"new-0", b"new-1"]
        consumer.commit()
        consumer.close()
        assert broker.groups.fetch_committed("g") == {("t", 0): 2}  # no "would move backward" from the old 5


def test_a_private_offset_store_is_bound_to_the_incarnation_too(tmp_path: Path) -> None:
    with Broker(persist_dir=str(tmp_path / "d")) as broker, OffsetStore(str(tmp_path / "mine")) as store:
        broker.produce_many_sync("t", [(None, b"a"), (None, b"b")])
        consumer = Consumer(broker, group="g", offset_store=store, auto_commit=False)
        consumer.subscribe("t")
        consumer.poll(timeout=5)
        consumer.commit()
        consumer.close()
        broker.delete_topic("t")
        broker.produce_many_sync("t", [(None, b"c")])
        again = Consumer(broker, group="g", offset_store=store, auto_commit=False)
        again.subscribe("t")
        assert [r.value for r in again.poll(timeout=5)] == [b"c"]
        again.close()
