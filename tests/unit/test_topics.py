"""lkstream.storage.topics: topic directories and topic.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lkstream.errors import InvalidArgumentError, StorageError, TopicExistsError, UnknownTopicError
from lkstream.storage.topic_config import TopicConfig
from lkstream.storage.topics import TOPIC_META, StoredTopic, TopicSettings, TopicStore

DEFAULTS = TopicSettings(1, -1, -1)


def test_create_makes_partition_dirs_and_topic_json(tmp_path: Path) -> None:
    store = TopicStore(str(tmp_path))
    configs = TopicConfig.parse({"retention.ms": "1000", "cleanup.policy": "compact, delete"})
    topic_id = store.create("orders", 3, configs)
    topic_dir = tmp_path / "topics" / "orders"
    assert sorted(os.listdir(topic_dir)) == ["part0", "part1", "part2", TOPIC_META]
    assert json.loads((topic_dir / TOPIC_META).read_bytes()) == {
        "partitions": 3,
        "topic_id": topic_id.hex,
        "configs": {"cleanup.policy": "compact,delete", "retention.ms": "1000"},
    }
    assert store.load("orders", DEFAULTS) == StoredTopic(3, topic_id, configs)
    assert store.list() == ["orders"]


def test_update_replaces_the_configs_and_keeps_the_id(tmp_path: Path) -> None:
    store = TopicStore(str(tmp_path))
    topic_id = store.create("t", 1)
    store.update("t", StoredTopic(2, topic_id, TopicConfig.parse({"segment.bytes": "1048576"})))
    assert store.load("t", DEFAULTS) == StoredTopic(2, topic_id, TopicConfig.parse({"segment.bytes": "1048576"}))


@pytest.mark.parametrize(
    ("legacy", "defaults", "overrides"),
    [
        ({"retention_ms": -1, "retention_bytes": -1}, TopicSettings(1, -1, -1), {}),
        ({"retention_ms": 5000, "retention_bytes": -1}, TopicSettings(1, -1, -1), {"retention.ms": "5000"}),
        (
            {"retention_ms": -1, "retention_bytes": 7},
            TopicSettings(1, 9, -1),
            {"retention.ms": "-1", "retention.bytes": "7"},
        ),
        ({}, TopicSettings(1, 9, -1), {}),
    ],
)
def test_topic_json_from_before_configs_keeps_its_retention(
    tmp_path: Path, legacy: dict[str, int], defaults: TopicSettings, overrides: dict[str, str]
) -> None:
    store = TopicStore(str(tmp_path))
    store.create("old", 2)
    meta = tmp_path / "topics" / "old" / TOPIC_META
    topic_id = json.loads(meta.read_bytes())["topic_id"]
    meta.write_text(json.dumps({"partitions": 2, "topic_id": topic_id, **legacy}))
    loaded = store.load("old", defaults)
    assert loaded.partitions == 2 and loaded.topic_id.hex == topic_id
    assert loaded.configs.to_json() == overrides
    # Rewritten in the new form, so the next load does not depend on the broker's defaults any more.
    assert json.loads(meta.read_bytes()) == {"partitions": 2, "topic_id": topic_id, "configs": overrides}


def test_stored_configs_this_version_cannot_honour_stop_the_open(tmp_path: Path) -> None:
    store = TopicStore(str(tmp_path))
    store.create("t", 1, TopicConfig.parse({"cleanup.policy": "compact"}))
    meta = tmp_path / "topics" / "t" / TOPIC_META
    raw = json.loads(meta.read_bytes())
    raw["configs"]["confluent.tier.enable"] = "true"
    meta.write_text(json.dumps(raw))
    # Adopting the topic without its configs would drop cleanup.policy=compact: refuse, naming the file.
    with pytest.raises(StorageError, match=r"confluent\.tier\.enable.*topic\.json"):
        store.load("t", DEFAULTS)


def test_create_existing_raises_topic_exists(tmp_path: Path) -> None:
    store = TopicStore(str(tmp_path))
    store.create("t", 1)
    with pytest.raises(TopicExistsError):
        store.create("t", 1)


def test_load_unknown_topic_raises_unknown_topic(tmp_path: Path) -> None:
    with pytest.raises(UnknownTopicError):
        TopicStore(str(tmp_path)).load("nope", DEFAULTS)


def test_topic_without_topic_json_is_adopted_from_its_partition_dirs(tmp_path: Path) -> None:
    store = TopicStore(str(tmp_path))
    for pid in (0, 1, 3):
        os.makedirs(tmp_path / "topics" / "restored" / f"part{pid}")
    stored = store.load("restored", TopicSettings(1, 500, -1))
    assert stored.partitions == 4 and stored.configs == TopicConfig()
    assert (tmp_path / "topics" / "restored" / TOPIC_META).exists()


def test_garbage_topic_json_falls_back_to_adoption(tmp_path: Path) -> None:
    store = TopicStore(str(tmp_path))
    store.create("t", 2)
    (tmp_path / "topics" / "t" / TOPIC_META).write_bytes(b"{not json")
    assert store.load("t", DEFAULTS).partitions == 2


def test_delete_removes_the_topic_and_leaves_the_trash_empty(tmp_path: Path) -> None:
    store = TopicStore(str(tmp_path))
    store.create("t", 2)
    store.delete("t")
    assert store.list() == []
    assert os.listdir(tmp_path / "trash") == []
    with pytest.raises(UnknownTopicError):
        store.delete("t")


def test_leftover_trash_is_emptied_on_open(tmp_path: Path) -> None:
    os.makedirs(tmp_path / "trash" / "t-123" / "part0")
    TopicStore(str(tmp_path))
    assert os.listdir(tmp_path / "trash") == []


@pytest.mark.parametrize(
    "kw",
    [
        {"partitions": 0},
        {"partitions": 10_001},
        {"partitions": 1, "retention_ms": -2},
        {"partitions": 1, "retention_bytes": 1.5},
    ],
)
def test_topic_settings_validate(kw: dict[str, object]) -> None:
    with pytest.raises(InvalidArgumentError):
        TopicSettings(**kw)  # type: ignore[arg-type]


def test_topic_dir_rejects_path_traversal(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        TopicStore(str(tmp_path)).topic_dir("..")
