"""The embedded broker's topic configs (issue 24): create, alter, persist, and each config honoured.

Each test shows the behaviour a config changes (segments rolled, segments deleted or kept),
not only the stored value.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lkstream import Broker
from lkstream.errors import InvalidConfigError, RecordTooLargeError, UnknownTopicError, UnsupportedConfigError
from lkstream.format.batch import parse_header
from lkstream.format.codec import iter_batches
from lkstream.storage.clock import ManualClock
from lkstream.storage.topic_config import ConfigSource, EffectiveTopicConfig, TopicConfig

MakeBroker = Callable[..., Broker]
MiB = 1024 * 1024


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[MakeBroker]:
    made: list[Broker] = []

    def make(**settings: object) -> Broker:
        settings.setdefault("persist_dir", str(tmp_path / "data"))
        broker = Broker(**settings)  # type: ignore[arg-type]
        made.append(broker)
        return broker

    yield make
    for broker in made:
        broker.close()


def _fill(broker: Broker, topic: str, batches: int, size: int) -> None:
    for i in range(batches):
        broker.produce_many_sync(topic, [(b"k%d" % i, b"x" * size)], partition=0)


def test_create_with_configs_persists_them_and_describe_reports_them(make_broker: MakeBroker, tmp_path: Path) -> None:
    broker = make_broker()
    broker.create_topic("changelog", 2, configs={"cleanup.policy": "compact", "segment.bytes": str(MiB)})
    description = broker.describe_topic("changelog")
    assert description.configs.to_json() == {"cleanup.policy": "compact", "segment.bytes": str(MiB)}
    effective = broker.topic_config("changelog")
    assert effective.compact and not effective.delete and effective.segment_bytes == MiB
    meta = json.loads((tmp_path / "data" / "topics" / "changelog" / "topic.json").read_bytes())
    assert meta["configs"] == {"cleanup.policy": "compact", "segment.bytes": str(MiB)}
    broker.close()
    again = make_broker()
    assert again.topic_config("changelog") == effective
    assert again.describe_topic("changelog").configs == description.configs


def test_a_refused_config_creates_nothing(make_broker: MakeBroker) -> None:
    broker = make_broker()
    with pytest.raises(InvalidConfigError, match=r"unknown topic config 'cleanup\.policies'"):
        broker.create_topic("t", configs={"cleanup.policies": "compact"})
    with pytest.raises(UnsupportedConfigError, match="one replica"):
        broker.create_topic("t", configs={"min.insync.replicas": "2"})
    with pytest.raises(UnsupportedConfigError, match="max_batch_bytes"):
        broker.create_topic("t", configs={"max.message.bytes": str(64 * MiB)})
    assert broker.list_topics() == []


def test_retention_shorthands_are_the_retention_overrides(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", retention_ms=1000, configs={"retention.bytes": "7"})
    assert broker.describe_topic("t").configs.to_json() == {"retention.bytes": "7", "retention.ms": "1000"}


def test_alter_sets_and_deletes_persists_and_tells_observers(make_broker: MakeBroker) -> None:
    broker = make_broker(retention_ms=10_000)
    seen: list[tuple[str, EffectiveTopicConfig]] = []
    broker.topic_config_observers.append(lambda topic, effective: seen.append((topic, effective)))
    broker.create_topic("t", configs={"retention.ms": "5000"})
    configs = broker.alter_topic_configs("t", set={"cleanup.policy": "compact,delete"}, delete=["retention.ms"])
    assert configs.to_json() == {"cleanup.policy": "compact,delete"}
    assert [(topic, e.retention_ms, e.cleanup_policy) for topic, e in seen] == [
        ("t", 10_000, frozenset({"compact", "delete"}))
    ]
    entries = {e.name: e for e in broker.describe_topic_configs("t")}
    assert entries["retention.ms"].source is ConfigSource.STATIC_BROKER_CONFIG
    assert entries["cleanup.policy"].source is ConfigSource.DYNAMIC_TOPIC_CONFIG
    broker.close()
    assert make_broker(retention_ms=10_000).describe_topic("t").configs == configs


def test_a_refused_alter_changes_nothing(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", configs={"retention.ms": "5000"})
    with pytest.raises(InvalidConfigError):
        broker.alter_topic_configs("t", set={"retention.ms": "5000", "segment.bytes": "12"})
    assert broker.describe_topic("t").configs == TopicConfig.parse({"retention.ms": "5000"})
    with pytest.raises(UnknownTopicError):
        broker.alter_topic_configs("missing", set={"retention.ms": "1"})


def test_a_failing_observer_does_not_fail_the_alter(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t")

    def broken(topic: str, effective: EffectiveTopicConfig) -> None:
        raise RuntimeError("observer bug")

    broker.topic_config_observers.append(broken)
    broker.alter_topic_configs("t", set={"retention.ms": "1"})
    assert broker.topic_config("t").retention_ms == 1


def test_segment_bytes_per_topic_rolls_segments(make_broker: MakeBroker) -> None:
    broker = make_broker(segment_max_bytes=64 * MiB)
    broker.create_topic("small", 1, configs={"segment.bytes": str(MiB)})
    broker.create_topic("large", 1)
    for topic in ("small", "large"):
        _fill(broker, topic, 12, 200 * 1024)
    assert broker.describe_topic("small").partitions[0].segment_count >= 3
    assert broker.describe_topic("large").partitions[0].segment_count == 1


def test_an_alter_of_segment_bytes_applies_to_open_partitions(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", 1)
    _fill(broker, "t", 6, 200 * 1024)
    assert broker.describe_topic("t").partitions[0].segment_count == 1
    broker.alter_topic_configs("t", set={"segment.bytes": str(MiB)})
    _fill(broker, "t", 6, 200 * 1024)
    assert broker.describe_topic("t").partitions[0].segment_count >= 2


def test_retention_ms_per_topic_and_its_alter_apply_without_a_restart(make_broker: MakeBroker) -> None:
    clock = ManualClock()
    broker = make_broker(clock=clock)
    for topic in ("kept", "expiring"):
        broker.create_topic(topic, 1, configs={"segment.bytes": str(MiB)})
        _fill(broker, topic, 12, 200 * 1024)
    broker.alter_topic_configs("expiring", set={"retention.ms": "60000"})
    clock.advance(120_000)
    assert broker.enforce_retention() > 0
    assert broker.describe_topic("expiring").partitions[0].log_start_offset > 0
    assert broker.describe_topic("kept").partitions[0].log_start_offset == 0


def test_retention_bytes_per_topic_deletes_old_segments(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", 1, configs={"segment.bytes": str(MiB), "retention.bytes": str(MiB)})
    _fill(broker, "t", 20, 200 * 1024)
    broker.enforce_retention()
    stats = broker.describe_topic("t").partitions[0]
    assert stats.log_start_offset > 0 and stats.size_bytes < 3 * MiB


def test_without_delete_in_cleanup_policy_retention_deletes_nothing(make_broker: MakeBroker) -> None:
    clock = ManualClock()
    broker = make_broker(clock=clock, retention_ms=1000)  # every topic expires quickly by default
    broker.create_topic("compacted", 1, configs={"cleanup.policy": "compact", "segment.bytes": str(MiB)})
    broker.create_topic("deleting", 1, configs={"segment.bytes": str(MiB)})
    for topic in ("compacted", "deleting"):
        _fill(broker, topic, 12, 200 * 1024)
    clock.advance(10_000)
    broker.enforce_retention()
    assert broker.describe_topic("compacted").partitions[0].log_start_offset == 0
    assert broker.describe_topic("deleting").partitions[0].log_start_offset > 0
    # Adding delete back lets retention run on the compacted topic too.
    broker.alter_topic_configs("compacted", set={"cleanup.policy": "compact,delete"})
    broker.enforce_retention()
    assert broker.describe_topic("compacted").partitions[0].log_start_offset > 0


def test_partitions_built_after_an_alter_use_the_new_configs(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", 4)  # partitions are built at their first use
    broker.alter_topic_configs("t", set={"segment.bytes": str(MiB)})
    _fill(broker, "t", 12, 200 * 1024)
    assert broker.describe_topic("t").partitions[0].segment_count >= 3


def test_create_partitions_keeps_the_configs(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", 1, configs={"cleanup.policy": "compact"})
    broker.create_partitions("t", 3)
    broker.close()
    again = make_broker()
    assert again.partitions_for("t") == 3
    assert again.topic_config("t").compact


# -- the produce path: what the embedded API's batches become -----------------------------------------


def _codecs(broker: Broker, topic: str) -> set[int]:
    data = broker.fetch(topic, 0, 0, 64 * MiB).data
    return {parse_header(batch).compression for _, batch in iter_batches(data)}


def test_embedded_produce_to_a_log_append_time_topic_is_stamped(make_broker: MakeBroker) -> None:
    clock = ManualClock(1_800_000_000_000)
    broker = make_broker(clock=clock)
    broker.create_topic("t", 1, configs={"message.timestamp.type": "LogAppendTime"})
    broker.produce_many_sync("t", [(b"k", b"v1"), (b"k", b"v2")])
    clock.advance(5)
    broker.produce_many_sync("t", [(b"k", b"v3", [("h", b"x")])])  # headers: the general path
    records = broker.read_from("t", 0, 0)
    assert [(r.timestamp, r.timestamp_type) for r in records] == [
        (1_800_000_000_000, 1),
        (1_800_000_000_000, 1),
        (1_800_000_000_005, 1),
    ]


def test_embedded_produce_uses_the_topics_codec(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("gz", 1, configs={"compression.type": "gzip"})
    broker.create_topic("plain", 1, configs={"compression.type": "uncompressed"})
    broker.produce_many_sync("gz", [(None, b"x" * 100)] * 5)
    broker.produce_many_sync("plain", [(None, b"x" * 100)] * 5, compression="zstd")
    assert (_codecs(broker, "gz"), _codecs(broker, "plain")) == ({1}, {0})
    assert [r.value for r in broker.read_from("gz", 0, 0)] == [b"x" * 100] * 5


def test_embedded_produce_splits_at_max_message_bytes_and_refuses_a_record_above_it(make_broker: MakeBroker) -> None:
    broker = make_broker()
    broker.create_topic("t", 1, configs={"max.message.bytes": "4096"})
    broker.produce_many_sync("t", [(None, b"x" * 1000)] * 20)
    assert broker.describe_topic("t").partitions[0].next_offset == 20
    data = broker.fetch("t", 0, 0, MiB).data
    assert all(len(batch) <= 4096 for _, batch in iter_batches(data))
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes of topic 't'"):
        broker.produce_many_sync("t", [(None, b"y" * 100), (None, b"z" * 5000)])
    assert broker.describe_topic("t").partitions[0].next_offset == 20  # nothing of the refused call
