"""lkstream.storage.topics: topic directories and topic.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lkstream.errors import InvalidArgumentError, TopicExistsError, UnknownTopicError
from lkstream.storage.topics import TOPIC_META, TopicSettings, TopicStore

DEFAULTS = TopicSettings(1, -1, -1)


def test_create_makes_partition_dirs_and_topic_json(tmp_path: Path) -> None:
    store = TopicStore(str(tmp_path))
    topic_id = store.create("orders", TopicSettings(3, 1000, 2000))
    topic_dir = tmp_path / "topics" / "orders"
    assert sorted(os.listdir(topic_dir)) == ["part0", "part1", "part2", TOPIC_META]
    assert json.loads((topic_dir / TOPIC_META).read_bytes()) == {
        "partitions": 3,
        "retention_ms": 1000,
        "retention_bytes": 2000,
        "topic_id": topic_id.hex,
    }
    assert store.load("orders", DEFAULTS) == (TopicSettings(3, 1000, 2000), topic_id)
    assert store.list() == ["orders"]


def test_create_existing_raises_topic_exists(tmp_path: Path) -> None:
    store = TopicStore(str(tmp_path))
    store.create("t", DEFAULTS)
    with pytest.raises(TopicExistsError):
        store.create("t", DEFAULTS)


def test_load_unknown_topic_raises_unknown_topic(tmp_path: Path) -> None:
    with pytest.raises(UnknownTopicError):
        TopicStore(str(tmp_path)).load("nope", DEFAULTS)


def test_topic_without_topic_json_is_adopted_from_its_partition_dirs(tmp_path: Path) -> None:
    store = TopicStore(str(tmp_path))
    for pid in (0, 1, 3):
        os.makedirs(tmp_path / "topics" / "restored" / f"part{pid}")
    settings, _ = store.load("restored", TopicSettings(1, 500, -1))
    assert settings == TopicSettings(4, 500, -1)
    assert (tmp_path / "topics" / "restored" / TOPIC_META).exists()


def test_garbage_topic_json_falls_back_to_adoption(tmp_path: Path) -> None:
    store = TopicStore(str(tmp_path))
    store.create("t", TopicSettings(2))
    (tmp_path / "topics" / "t" / TOPIC_META).write_bytes(b"{not json")
    assert store.load("t", DEFAULTS)[0].partitions == 2


def test_delete_removes_the_topic_and_leaves_the_trash_empty(tmp_path: Path) -> None:
    store = TopicStore(str(tmp_path))
    store.create("t", TopicSettings(2))
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
