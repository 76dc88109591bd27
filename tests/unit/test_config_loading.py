"""lkstream.config.load_config: YAML file < LKSTREAM_* environment < overrides, strictly checked."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from lkstream import BrokerConfig, InvalidArgumentError
from lkstream.config import IGNORED_ENV, load_config

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "config.yml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# -- precedence ---------------------------------------------------------------------------------


def test_no_sources_gives_the_defaults() -> None:
    loaded = load_config(env={})
    assert loaded.broker == BrokerConfig.build({})
    assert loaded.server == {}
    assert loaded.sources == {}


def test_file_beats_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "fsync_mode: sync\npartitions: 3\n")
    loaded = load_config(path, env={})
    assert loaded.broker.fsync_mode == "sync"
    assert loaded.broker.partitions == 3
    assert loaded.broker.segment_max_bytes == BrokerConfig.build({}).segment_max_bytes  # untouched default
    assert loaded.sources == {"fsync_mode": f"file {path}", "partitions": f"file {path}"}


def test_env_beats_file_and_overrides_beat_env(tmp_path: Path) -> None:
    path = write(tmp_path, "fsync_mode: none\npartitions: 3\nsegment_max_bytes: 8192\n")
    env = {"LKSTREAM_FSYNC_MODE": "sync", "LKSTREAM_PARTITIONS": "5"}
    loaded = load_config(path, env=env, overrides={"partitions": 7})
    assert loaded.broker.segment_max_bytes == 8192  # file only
    assert loaded.broker.fsync_mode == "sync"  # env over file
    assert loaded.broker.partitions == 7  # override over env and file
    assert loaded.sources["segment_max_bytes"] == f"file {path}"
    assert loaded.sources["fsync_mode"] == "environment variable LKSTREAM_FSYNC_MODE"
    assert loaded.sources["partitions"] == "override partitions"


def test_none_override_means_flag_not_given(tmp_path: Path) -> None:
    path = write(tmp_path, "partitions: 3\n")
    loaded = load_config(path, env={}, overrides={"partitions": None, "persist_dir": tmp_path / "d"})
    assert loaded.broker.partitions == 3
    assert loaded.broker.persist_dir == str(tmp_path / "d")  # a Path flag value becomes a str


def test_server_section_is_merged_raw_across_sources(tmp_path: Path) -> None:
    path = write(tmp_path, "server:\n  grpc_port: 9090\n  http_port: 8080\n  grpc_host: 127.0.0.1\n")
    loaded = load_config(
        path,
        env={"LKSTREAM_SERVER__HTTP_PORT": "8181"},
        overrides={"server.grpc_host": "0.0.0.0"},
    )
    # values are not interpreted here: the server's own model validates (and parses env strings)
    assert loaded.server == {"grpc_port": 9090, "http_port": "8181", "grpc_host": "0.0.0.0"}
    assert loaded.sources["server.http_port"] == "environment variable LKSTREAM_SERVER__HTTP_PORT"
    assert loaded.sources["server.grpc_host"] == "override server.grpc_host"


def test_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LKSTREAM_FSYNC_INTERVAL_MS", "250")
    assert load_config().broker.fsync_interval_ms == 250


# -- environment parsing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("TRUE", True), ("1", True), ("false", False), ("False", False), ("0", False)],
)
def test_env_booleans(raw: str, expected: bool) -> None:
    assert load_config(env={"LKSTREAM_AUTO_CREATE_TOPICS": raw}).broker.auto_create_topics is expected


@pytest.mark.parametrize("raw", ["yes", "on", "", "2", "truthy"])
def test_env_bad_boolean_names_the_variable(raw: str) -> None:
    with pytest.raises(InvalidArgumentError, match="LKSTREAM_AUTO_CREATE_TOPICS") as info:
        load_config(env={"LKSTREAM_AUTO_CREATE_TOPICS": raw})
    assert "auto_create_topics" in str(info.value)


def test_env_integers_and_strings() -> None:
    loaded = load_config(
        env={
            "LKSTREAM_SEGMENT_MAX_BYTES": "1048576",
            "LKSTREAM_RETENTION_MS": "-1",
            "LKSTREAM_PERSIST_DIR": "/var/lib/lkstream",
            "LKSTREAM_FSYNC_MODE": "none",
        }
    )
    assert loaded.broker.segment_max_bytes == 1048576
    assert loaded.broker.retention_ms == -1
    assert loaded.broker.persist_dir == "/var/lib/lkstream"
    assert loaded.broker.fsync_mode == "none"


@pytest.mark.parametrize("raw", ["64MiB", "1.5", "", "0x10"])
def test_env_bad_integer_names_the_variable(raw: str) -> None:
    with pytest.raises(InvalidArgumentError, match="LKSTREAM_SEGMENT_MAX_BYTES") as info:
        load_config(env={"LKSTREAM_SEGMENT_MAX_BYTES": raw})
    assert "segment_max_bytes" in str(info.value)


def test_env_out_of_range_names_key_and_variable() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        load_config(env={"LKSTREAM_FSYNC_INTERVAL_MS": "0"})
    assert "fsync_interval_ms" in str(info.value)
    assert "environment variable LKSTREAM_FSYNC_INTERVAL_MS" in str(info.value)


def test_unrelated_and_ignored_env_vars_are_skipped() -> None:
    env = {"PATH": "/usr/bin", "lkstream_partitions": "nonsense", **{name: "x" for name in IGNORED_ENV}}
    assert "LKSTREAM_CRASH_SEED" in IGNORED_ENV  # the crash tests' seed must not break a daemon start
    assert load_config(env=env).broker == BrokerConfig.build({})


@pytest.mark.parametrize("name", ["LKSTREAM_FSYNC_INTERVAL", "LKSTREAM_", "LKSTREAM_SERVER"])
def test_unknown_env_var_is_rejected_naming_it(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(name)):
        load_config(env={name: "5"})


# -- the YAML file ------------------------------------------------------------------------------


def test_unknown_yaml_key_is_rejected_naming_key_and_file(tmp_path: Path) -> None:
    path = write(tmp_path, "fsync_mode: group\nfsync_interval: 5\n")
    with pytest.raises(InvalidArgumentError) as info:
        load_config(path, env={})
    assert "'fsync_interval'" in str(info.value)
    assert path in str(info.value)


def test_unknown_override_is_rejected_naming_it() -> None:
    with pytest.raises(InvalidArgumentError, match="'segment_bytes'") as info:
        load_config(env={}, overrides={"segment_bytes": 4096})
    assert "override segment_bytes" in str(info.value)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("fsync_mode: always\n", "fsync_mode"),
        ("partitions: 0\n", "partitions"),
        ("segment_max_bytes: 10\n", "segment_max_bytes"),
        ('partitions: "4"\n', "partitions"),  # file values are not converted from strings
        ("segment_max_bytes: true\n", "segment_max_bytes"),  # nor from booleans
        ("auto_create_topics: 1\n", "auto_create_topics"),
        ("persist_dir: 42\n", "persist_dir"),
        ("fsync_mode: off\n", "fsync_mode"),  # YAML 1.1 reads `off` as false
    ],
)
def test_bad_yaml_value_names_key_and_file(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InvalidArgumentError) as info:
        load_config(path, env={})
    assert key in str(info.value)
    assert f"file {path}" in str(info.value)


def test_bad_override_names_the_flag() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        load_config(env={}, overrides={"fsync_mode": "always"})
    assert "fsync_mode" in str(info.value)
    assert "override fsync_mode" in str(info.value)


def test_cross_field_error_names_both_sources(tmp_path: Path) -> None:
    path = write(tmp_path, "max_batch_bytes: 2048\n")
    with pytest.raises(InvalidArgumentError) as info:
        load_config(path, env={"LKSTREAM_MAX_MESSAGE_BYTES": "4096"})
    message = str(info.value)
    assert f"max_batch_bytes from file {path}" in message
    assert "max_message_bytes from environment variable LKSTREAM_MAX_MESSAGE_BYTES" in message


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("- fsync_mode\n- sync\n", "list"),
        ("just a string\n", "str"),
        ("42\n", "int"),
    ],
)
def test_non_mapping_yaml_is_rejected_naming_the_file(tmp_path: Path, text: str, what: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InvalidArgumentError, match="must be a mapping") as info:
        load_config(path, env={})
    assert path in str(info.value)
    assert what in str(info.value)


def test_server_section_must_be_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "server: 9090\n")
    with pytest.raises(InvalidArgumentError, match="'server' must be a mapping") as info:
        load_config(path, env={})
    assert path in str(info.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    path = str(tmp_path / "nope.yml")
    with pytest.raises(InvalidArgumentError, match="no such file") as info:
        load_config(path, env={})
    assert path in str(info.value)


def test_directory_instead_of_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="cannot read") as info:
        load_config(str(tmp_path), env={})
    assert str(tmp_path) in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        "fsync_mode: [group\n",  # unclosed flow sequence
        "a: 1\n b: 2\n",  # bad indentation
        "---\na: 1\n---\nb: 2\n",  # two documents
        "partitions: 1\npartitions: 2\n",  # a key twice: PyYAML would silently keep the last
        "key: !!python/object:os.system x\n",  # no arbitrary objects
    ],
)
def test_unparsable_yaml_is_rejected_naming_the_file(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InvalidArgumentError, match="not valid YAML") as info:
        load_config(path, env={})
    assert path in str(info.value)


def test_empty_file_means_all_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "# nothing set yet\n")
    assert load_config(path, env={}).broker == BrokerConfig.build({})


# -- shipped files and docs ---------------------------------------------------------------------


def test_local_yml_loads_with_loopback_ports() -> None:
    loaded = load_config(ROOT / "conf" / "local.yml", env={})
    assert loaded.broker.persist_dir == "./data"
    assert loaded.broker.fsync_mode == "group"
    assert loaded.server["grpc_host"] == loaded.server["http_host"] == "127.0.0.1"
    assert (loaded.server["grpc_port"], loaded.server["http_port"]) == (9090, 8080)
    assert loaded.server["max_request_bytes"] > loaded.broker.max_batch_bytes  # room for framing


def test_example_prod_yml_loads() -> None:
    loaded = load_config(ROOT / "conf" / "example-prod.yml", env={})
    assert loaded.broker.persist_dir == "/data"
    assert loaded.broker.fsync_mode == "group"
    assert loaded.broker.retention_ms == 7 * 24 * 3600 * 1000
    assert (loaded.server["grpc_port"], loaded.server["http_port"]) == (9090, 8080)
    assert loaded.server["max_request_bytes"] > loaded.broker.max_batch_bytes  # room for framing


@pytest.mark.parametrize("name", ["local.yml", "example-prod.yml"])
def test_every_shipped_key_has_a_comment(name: str) -> None:
    for line in (ROOT / "conf" / name).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#") and line.rstrip() != "server:":
            assert "#" in line, f"{name}: no comment on {line!r}"


def _readme_rows() -> dict[str, tuple[str, str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str]] = {}
    for match in re.finditer(r"^\| `(\w+)` \| `([^`]*)` \| (.*) \|$", section, re.MULTILINE):
        rows[match.group(1)] = (match.group(2), match.group(3))
    return rows


def test_readme_lists_every_field_with_its_default() -> None:
    rows = _readme_rows()
    assert list(rows) == list(BrokerConfig.model_fields)
    defaults: dict[str, Any] = BrokerConfig.build({}).model_dump()
    for name, info in BrokerConfig.model_fields.items():
        default, meaning = rows[name]
        expected = str(defaults[name]).lower() if isinstance(defaults[name], bool) else str(defaults[name])
        assert default == expected, name  # as written in YAML
        assert meaning == info.description, name
