"""lkstream.storage.names: names that become file names."""

from __future__ import annotations

import pytest

from lkstream.errors import InvalidArgumentError
from lkstream.storage.names import (
    MAX_NAME_LENGTH,
    group_label,
    is_plain_group,
    parse_partition_dir,
    partition_dir_name,
    validate_group,
    validate_topic,
)

BAD_NAMES = [
    "..",
    ".",
    "a/b",
    "/abs",
    "../x",
    "a\\b",
    "",
    "x" * 250,
    "a b",
    "tab\t",
    "new\nline",
    "nul\x00",
    "ünïcode",
    "a:b",
    "*",
    None,
    5,
    b"bytes",
]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_validate_topic_rejects_unsafe_names(name: object) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid topic name"):
        validate_topic(name)


#: Kafka accepts any non-empty string as a group id (issue 24): every one of these is a group.
KAFKA_GROUP_IDS = [
    ".",
    "..",
    "a/b",
    "/abs",
    "../x",
    "a\\b",
    "x" * 250,
    "a b",
    "tab\t",
    "new\nline",
    "nul\x00",
    "ünïcode",
    "a:b",
    "*",
    "a__b",
    "__",
    "g_",
    "g@example",
    "é" * 16383,
]


@pytest.mark.parametrize("name", KAFKA_GROUP_IDS, ids=repr)
def test_validate_group_accepts_every_id_kafka_accepts(name: str) -> None:
    assert validate_group(name) == name


@pytest.mark.parametrize("name", ["", None, 5, b"bytes", "\ud800", "x" * 32768, "é" * 16384], ids=repr)
def test_validate_group_rejects_what_no_kafka_client_can_send(name: object) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid group id"):
        validate_group(name)


def test_only_groups_of_the_old_rule_are_plain() -> None:
    assert is_plain_group("strategy-v1") and is_plain_group("g_1")
    assert not any(is_plain_group(name) for name in ("a__b", "g_", "a b", "x" * 250, ".."))


@pytest.mark.parametrize("name", KAFKA_GROUP_IDS, ids=repr)
def test_group_labels_are_printable_bounded_and_distinct(name: str) -> None:
    label = group_label(name)
    assert label.isprintable() and len(label) <= MAX_NAME_LENGTH
    assert group_label(name + "x") != label


@pytest.mark.parametrize("name", ["a", "market.ticks", "A-b_c.9", "...", "x" * 249, "_", "-"])
def test_validate_topic_accepts_kafka_legal_names(name: str) -> None:
    assert validate_topic(name) == name


def test_max_name_length_is_kafkas_249() -> None:
    assert MAX_NAME_LENGTH == 249
    validate_topic("t" * MAX_NAME_LENGTH)
    with pytest.raises(InvalidArgumentError):
        validate_topic("t" * (MAX_NAME_LENGTH + 1))


@pytest.mark.parametrize("name", ["strategy-v1", "g_1", "g.2", "x" * 249])
def test_validate_group_accepts_safe_names(name: str) -> None:
    assert validate_group(name) == name


def test_error_message_shows_the_rule() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        validate_topic("a/b")
    assert "[A-Za-z0-9._-]" in str(info.value)
    assert "'a/b'" in str(info.value)


@pytest.mark.parametrize("pid", [0, 1, 17, 999_999_999])
def test_partition_dir_names_round_trip(pid: int) -> None:
    assert parse_partition_dir(partition_dir_name(pid)) == pid


@pytest.mark.parametrize(
    "name", ["part", "part01", "part-1", "partx", "Part1", "part1.tmp", "xpart1", "part1234567890"]
)
def test_parse_partition_dir_rejects_anything_else(name: str) -> None:
    assert parse_partition_dir(name) is None


# Finding 11 of issue 12: ``$`` also matches before a trailing newline, so "orders\n" passed the old
# ``re.match(r"^...$")`` and coexisted with "orders". Every name rule is a full match.
@pytest.mark.parametrize("name", ["orders\n", "orders\r\n", "\norders", "orders\n\n"], ids=repr)
def test_validate_topic_rejects_a_trailing_or_leading_newline(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid topic name"):
        validate_topic(name)


def test_parse_partition_dir_rejects_a_trailing_newline() -> None:
    assert parse_partition_dir("part1\n") is None


def test_parse_segment_name_rejects_a_trailing_newline() -> None:
    from lkstream.storage.segment import parse_segment_name

    assert parse_segment_name("00000000000000000042.seg") == (42, ".seg")
    assert parse_segment_name("00000000000000000042.seg\n") is None


@pytest.mark.parametrize("name", ["host-1", "a.b_c", "x" * 249])
def test_validate_instance_id_accepts_kafka_legal_names(name: str) -> None:
    from lkstream.storage.names import validate_instance_id

    assert validate_instance_id(name) == name


@pytest.mark.parametrize("name", ["", "x" * 250, "a b", "host\n", "é", None, 3], ids=repr)
def test_validate_instance_id_rejects_anything_else(name: object) -> None:
    from lkstream.storage.names import validate_instance_id

    with pytest.raises(InvalidArgumentError, match="invalid instance id"):
        validate_instance_id(name)


@pytest.mark.parametrize("name", ["", "consumer-1", "my app 1.0", "x" * 255])
def test_validate_client_id_accepts_printable_ascii(name: str) -> None:
    from lkstream.storage.names import validate_client_id

    assert validate_client_id(name) == name


@pytest.mark.parametrize("name", ["x" * 256, "tab\t", "line\n", "nul\x00", "\x7f", "é"], ids=repr)
def test_validate_client_id_rejects_control_and_non_ascii_characters(name: str) -> None:
    from lkstream.storage.names import validate_client_id

    with pytest.raises(InvalidArgumentError, match="invalid client id"):
        validate_client_id(name)
