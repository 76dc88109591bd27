"""lkstream.config: typed, validated broker configuration."""

from __future__ import annotations

import pytest

from lkstream import BrokerConfig, InvalidArgumentError


def test_defaults_match_the_documented_values() -> None:
    config = BrokerConfig.build({})
    assert config.fsync_mode == "group"
    assert config.fsync_interval_ms == 100
    assert config.fsync_group_bytes == 128 * 1024
    assert config.segment_max_bytes == 64 * 1024 * 1024
    assert config.index_interval_bytes == 4096
    assert config.max_message_bytes == 1024 * 1024
    assert config.auto_create_topics is True
    assert (config.retention_ms, config.retention_bytes) == (-1, -1)


def test_unknown_keys_are_rejected_naming_the_key() -> None:
    with pytest.raises(InvalidArgumentError, match="fsync_interval"):
        BrokerConfig.build({"fsync_interval": 5})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("fsync_mode", "always"),
        ("fsync_interval_ms", 0),
        ("segment_max_bytes", 10),
        ("partitions", 0),
        ("retention_ms", -2),
        ("max_inflight_bytes", 0),
        ("index_interval_bytes", -1),
    ],
)
def test_out_of_range_values_are_rejected_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        BrokerConfig.build({key: value})
    assert key in str(info.value)


def test_max_batch_bytes_must_hold_a_message() -> None:
    with pytest.raises(InvalidArgumentError, match="max_batch_bytes"):
        BrokerConfig.build({"max_message_bytes": 2048, "max_batch_bytes": 1024})


def test_config_is_frozen() -> None:
    config = BrokerConfig.build({})
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises its own ValidationError
        config.partitions = 5  # type: ignore[misc]
    assert config.partitions == 1
