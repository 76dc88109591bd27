"""Typed, validated broker configuration, and the one loader for files, environment and flags.

Names follow the blueprint (``persist_dir``, ``fsync_mode``, ``fsync_interval_ms``,
``fsync_group_bytes``, ``segment_max_bytes``, ``partitions``); every limit carries
its unit in its name. Unknown keys and out-of-range values are rejected with a
message naming the key.

Loading (:func:`load_config`)
-----------------------------
Each key takes the value of the highest source that sets it::

    BrokerConfig defaults  <  YAML file  <  LKSTREAM_* environment  <  overrides (CLI flags)

The YAML file is one mapping. :class:`BrokerConfig` fields sit at the top level; the
daemon's own settings (gRPC/HTTP host and port, request size limits, ...) sit under a
``server:`` section, which this module does *not* interpret: it is merged from the same
sources and handed back raw in :attr:`LoadedConfig.server`, for the server to validate
with its own model (``lkstream.server.settings``). ``conf/local.yml`` is the example::

    persist_dir: ./data
    fsync_mode: group
    server:
      grpc_port: 9090

Environment: ``LKSTREAM_<FIELD>`` (upper case) sets a broker field, parsed as the field's
type (integers as ``int()`` reads them, booleans only ``true``/``false``/``1``/``0``,
case-insensitive); ``LKSTREAM_SERVER__<KEY>`` (double underscore) sets ``server.<key>`` to
the raw string, for the server model to parse. Any other ``LKSTREAM_*`` variable is
rejected as unknown, except those in :data:`IGNORED_ENV` (variables of the test tools,
not configuration).

Overrides: a mapping of broker field names, or ``server.<key>``, to already-typed values;
``None`` means "flag not given" and is skipped.

Every failure raises :class:`InvalidArgumentError` naming the key and where its value came
from (``file conf/local.yml``, ``environment variable LKSTREAM_FSYNC_MODE``, ``override
fsync_mode``). File values and overrides must already have the field's type (no
``partitions: "4"``, no ``true`` for a number); only environment strings are converted.
:attr:`LoadedConfig.sources` tells, per key set anywhere, which source won, so the server
can name it too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml  # type: ignore[import-untyped,unused-ignore]
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lkstream.errors import InvalidArgumentError
from lkstream.storage.topic_config_keys import KEYS, LONG_MAX, BadValue

MiB = 1024 * 1024


class BrokerConfig(BaseModel):
    """Everything a broker needs; every field has a documented default."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    persist_dir: str = Field("./data", description="Data directory (created if missing).")
    fsync_mode: Literal["sync", "group", "none"] = Field(
        "group", description="sync: ack after fsync; group: fsync every interval/bytes; none: OS decides."
    )
    fsync_interval_ms: int = Field(
        100, ge=1, le=60_000, description="Group commit: fsync at most this long after a write."
    )
    fsync_group_bytes: int = Field(128 * 1024, ge=1, description="Group commit: fsync once this many bytes wait.")
    segment_max_bytes: int = Field(
        64 * MiB,
        ge=4096,
        le=2**31 - 1,
        description="Roll to a new segment past this size (a larger batch gets a segment of its own).",
    )
    index_interval_bytes: int = Field(4096, ge=0, description="Bytes of segment data between sparse index entries.")
    partitions: int = Field(1, ge=1, le=10_000, description="Partitions of auto-created topics.")
    max_partitions: int = Field(
        4096,
        ge=1,
        le=1_000_000,
        description="Partitions of all topics together; a create beyond it is refused (PartitionLimitError).",
    )
    max_open_files: int = Field(
        0,
        ge=0,
        description="Segment and index files kept open at once (an LRU shared by all partitions); "
        "0: RLIMIT_NOFILE minus open_files_reserve.",
    )
    open_files_reserve: int = Field(
        512, ge=0, description="Descriptors left to sockets and metadata files when max_open_files is 0."
    )
    auto_create_topics: bool = Field(True, description="Create unknown topics on first produce.")
    auto_create_partitions_burst: int = Field(
        100,
        ge=1,
        le=1_000_000,
        description="Partitions each principal (or client address, without auth) may auto-create at once; "
        "beyond it auto-creation is throttled (AutoCreateThrottledError).",
    )
    auto_create_partitions_per_s: int = Field(
        10, ge=1, le=1_000_000, description="How fast each caller's auto_create_partitions_burst refills."
    )
    retention_ms: int = Field(-1, ge=-1, description="Delete sealed segments older than this; -1 keeps forever.")
    retention_bytes: int = Field(
        -1,
        ge=-1,
        description="Delete oldest sealed segments while the rest still hold this many bytes (as Kafka); -1 never.",
    )
    retention_check_interval_ms: int = Field(60_000, ge=10, description="How often retention runs.")
    max_message_bytes: int = Field(1 * MiB, ge=1, le=256 * MiB, description="Largest key + value of one record.")
    cleanup_policy: str = Field(
        "delete",
        description="Topics' default cleanup.policy: delete, compact, or compact,delete (Kafka's log.cleanup.policy).",
    )
    segment_ms: int = Field(
        604_800_000,
        ge=1,
        le=LONG_MAX,
        description="Topics' default segment.ms: roll a partition's active segment once it is this old (log.roll.ms).",
    )
    delete_retention_ms: int = Field(
        86_400_000,
        ge=0,
        le=LONG_MAX,
        description="Topics' default delete.retention.ms: how long compaction keeps tombstones.",
    )
    min_cleanable_dirty_ratio: float = Field(
        0.5, ge=0.0, le=1.0, description="Topics' default min.cleanable.dirty.ratio (log.cleaner.min.cleanable.ratio)."
    )
    min_compaction_lag_ms: int = Field(
        0, ge=0, le=LONG_MAX, description="Topics' default min.compaction.lag.ms: records younger stay uncompacted."
    )
    max_compaction_lag_ms: int = Field(
        LONG_MAX, ge=1, le=LONG_MAX, description="Topics' default max.compaction.lag.ms: the longest a record waits."
    )
    compression_type: Literal["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"] = Field(
        "producer",
        description="Topics' default compression.type: producer keeps the producer's codec; a codec recompresses.",
    )
    message_timestamp_type: Literal["CreateTime", "LogAppendTime"] = Field(
        "CreateTime",
        description="Topics' default message.timestamp.type: LogAppendTime stamps batches with the broker's clock.",
    )
    max_batch_bytes: int = Field(16 * MiB, ge=1024, le=2**31 - 1, description="Largest record batch accepted.")
    max_decompressed_bytes: int = Field(
        64 * MiB,
        ge=1024,
        le=2**31 - 1,
        description="Largest records section one compressed batch may inflate to (produce and decoded reads).",
    )
    max_compression_ratio: int = Field(
        256,
        ge=1,
        le=1_000_000,
        description="Largest inflated / compressed size of a batch a producer sends (compression bombs).",
    )
    max_inflight_bytes: int = Field(256 * MiB, ge=1, description="Accepted, unacknowledged bytes before Backpressure.")
    max_admitted_bytes: int = Field(
        64 * MiB,
        ge=64 * 1024,
        le=2**40,
        description="Request bytes the daemon's listeners (gRPC, HTTP, Kafka) hold at once, read and not yet "
        "answered; beyond it a request is refused before it is decoded (Overloaded: RESOURCE_EXHAUSTED, HTTP 429).",
    )
    fetch_max_bytes: int = Field(
        55 * MiB,
        ge=1024,
        le=2**31 - 1,
        description="Record bytes of one Kafka Fetch answer, whatever the client asks (Kafka's fetch.max.bytes); "
        "the first batch may exceed it, so a consumer always progresses.",
    )
    hot_tail_bytes: int = Field(8 * MiB, ge=0, description="Newest batches kept in memory per partition.")
    hot_tail_total_bytes: int = Field(
        16 * MiB, ge=0, description="Newest batches kept in memory by all partitions together (oldest dropped first)."
    )
    checkpoint_interval_ms: int = Field(1000, ge=1, description="How often checkpoint.meta follows group commit.")
    log_cleaner_enabled: bool = Field(True, description="Run the log cleaner on compacted topics (Kafka's name).")
    log_cleaner_dedupe_buffer_bytes: int = Field(
        128 * MiB,
        ge=1024,
        le=2**40,
        description="Memory of the cleaner's key map (27 bytes a key); a log with more keys is cleaned in passes.",
    )
    log_cleaner_backoff_ms: int = Field(
        15_000, ge=10, description="How long the cleaner sleeps when no partition needs cleaning."
    )
    producer_id_expiration_ms: int = Field(
        86_400_000,
        ge=1,
        le=2**63 - 1,
        description="An idempotent producer's state is kept this long after its last write, then forgotten "
        "(Kafka's producer.id.expiration.ms).",
    )
    max_producer_states: int = Field(
        200_000,
        ge=1,
        le=100_000_000,
        description="Idempotent-producer states (one per producer and partition, 300-400 bytes each) kept at "
        "once; a new producer beyond it is refused until states expire (ProducerStateLimitError).",
    )
    group_min_session_timeout_ms: int = Field(
        6000,
        ge=1,
        le=2**31 - 1,
        description="Shortest session timeout a group member may ask for (Kafka's group.min.session.timeout.ms); "
        "a join below it is refused (INVALID_SESSION_TIMEOUT).",
    )
    group_max_session_timeout_ms: int = Field(
        1_800_000,
        ge=1,
        le=2**31 - 1,
        description="Longest session timeout a group member may ask for (Kafka's group.max.session.timeout.ms); "
        "a join above it is refused (INVALID_SESSION_TIMEOUT).",
    )
    group_max_size: int = Field(
        2**31 - 1,
        ge=1,
        le=2**31 - 1,
        description="Members of one group, joined or holding a member id from MEMBER_ID_REQUIRED "
        "(Kafka's group.max.size); a join beyond it is refused (GROUP_MAX_SIZE_REACHED).",
    )
    max_group_members: int = Field(
        100_000,
        ge=1,
        le=10_000_000,
        description="Members of all groups together, joined or pending; beyond it the oldest pending member id "
        "is forgotten, or the join refused (GROUP_MAX_SIZE_REACHED).",
    )
    group_consumer_migration_policy: Literal["bidirectional", "upgrade", "downgrade", "disabled"] = Field(
        "bidirectional",
        description="Kafka's group.consumer.migration.policy: which way a group of classic members converts "
        "when consumer-protocol members join (upgrade) or the last one leaves (downgrade).",
    )
    offset_metadata_max_bytes: int = Field(
        4096,
        ge=0,
        le=1 * MiB,
        description="Longest metadata string of a committed offset (Kafka's offset.metadata.max.bytes); "
        "a longer one is refused (OFFSET_METADATA_TOO_LARGE).",
    )

    @field_validator("cleanup_policy")
    @classmethod
    def _cleanup_policy_is_kafkas(cls, value: str) -> str:
        try:
            KEYS["cleanup.policy"].parse(value)
        except BadValue as exc:
            raise ValueError(f"cleanup_policy {value!r}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _batch_holds_a_message(self) -> BrokerConfig:
        if self.max_batch_bytes < self.max_message_bytes:
            raise ValueError("max_batch_bytes must be at least max_message_bytes")
        return self

    @model_validator(mode="after")
    def _session_bounds_ordered(self) -> BrokerConfig:
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError("group_min_session_timeout_ms must be at most group_max_session_timeout_ms")
        return self

    @classmethod
    def build(cls, values: dict[str, Any]) -> BrokerConfig:
        """Validate ``values``; raise :class:`InvalidArgumentError` naming each bad key."""
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}" for err in exc.errors()
            )
            raise InvalidArgumentError(f"invalid configuration: {problems}") from None


ENV_PREFIX = "LKSTREAM_"
SERVER_ENV_PREFIX = "LKSTREAM_SERVER__"
SERVER_SECTION = "server"

#: ``LKSTREAM_*`` variables that are not configuration and that :func:`load_config` skips.
#: ``LKSTREAM_CRASH_SEED`` seeds the crash tests (tests/crash); ``LKSTREAM_TOKEN`` and
#: ``LKSTREAM_TLS_CA`` are the command line's client credentials (``--token``, ``--tls-ca``);
#: ``LKSTREAM_BOOTSTRAP`` is the CLI's default ``--bootstrap`` (a client setting, not the daemon's).
#: Add a name here, with its purpose, before any other tool uses the prefix.
IGNORED_ENV: frozenset[str] = frozenset(
    {"LKSTREAM_CRASH_SEED", "LKSTREAM_TOKEN", "LKSTREAM_TLS_CA", "LKSTREAM_BOOTSTRAP"}
)

_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})


@dataclass(frozen=True)
class LoadedConfig:
    """What :func:`load_config` returns.

    ``broker`` is validated; ``server`` is the raw merged ``server:`` section (keys as
    written, values as YAML, environment strings or overrides gave them), for the server's
    own model. ``sources`` maps each key set by a source (``"fsync_mode"``,
    ``"server.grpc_port"``) to a description of the source that won.
    """

    broker: BrokerConfig
    server: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)


def load_config(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> LoadedConfig:
    """Merge defaults < YAML file at ``path`` < ``LKSTREAM_*`` in ``env`` < ``overrides``.

    ``env`` defaults to ``os.environ``; pass ``{}`` to ignore the environment. Raises
    :class:`InvalidArgumentError` naming the key and its source on any unknown key or bad
    value, and naming the file when it is missing, unreadable, not YAML or not a mapping.
    """
    broker: dict[str, Any] = {}
    server: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def put(key: str, value: Any, source: str) -> None:
        if key.startswith(SERVER_SECTION + "."):
            server[key[len(SERVER_SECTION) + 1 :]] = value
        else:
            broker[key] = value
        sources[key] = source

    if path is not None:
        for key, value, source in _from_file(os.fspath(path)):
            put(key, value, source)
    for key, value, source in _from_env(os.environ if env is None else env):
        put(key, value, source)
    for key, value, source in _from_overrides(overrides or {}):
        put(key, value, source)

    try:
        config = BrokerConfig.model_validate(broker, strict=True)
    except ValidationError as exc:
        raise InvalidArgumentError(f"invalid configuration: {_describe(exc, sources)}") from None
    return LoadedConfig(broker=config, server=server, sources=sources)


def _unknown(key: object, source: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"invalid configuration: unknown key {key!r} (from {source}); known keys are "
        f"{', '.join(BrokerConfig.model_fields)} and the {SERVER_SECTION!r} section"
    )


class _UniqueKeyLoader(yaml.SafeLoader):  # type: ignore[misc,unused-ignore]
    """``yaml.SafeLoader`` that rejects a key written twice in one mapping."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_position(exc: yaml.YAMLError) -> str:
    """``, line L, column C`` of a parse error (PyYAML counts from 0), or nothing when it has no mark."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return "" if mark is None else f", line {mark.line + 1}, column {mark.column + 1}"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What PyYAML found wrong, without its marks: they name ``<unicode string>``, not the file."""
    problem = getattr(exc, "problem", None)
    if not problem:
        return str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    return f"{problem} ({context})" if context else str(problem)


def _read_yaml(path: str) -> dict[Any, Any]:
    where = f"config file {path}"
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise InvalidArgumentError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"{where}: cannot read it ({exc})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        raise InvalidArgumentError(f"{where}{_yaml_position(exc)}: not valid YAML: {_yaml_problem(exc)}") from None
    if data is None:  # an empty (or all-comment) file: every default applies
        return {}
    if not isinstance(data, dict):
        raise InvalidArgumentError(
            f"{where}: the top level must be a mapping of keys to values, not {type(data).__name__}"
        )
    return data


def _from_file(path: str) -> list[tuple[str, Any, str]]:
    where = f"config file {path}"
    data = _read_yaml(path)
    source = f"file {path}"
    found: list[tuple[str, Any, str]] = []
    for key, value in data.items():
        if key == SERVER_SECTION:
            if value is None:
                continue
            if not isinstance(value, dict):
                raise InvalidArgumentError(
                    f"{where}: {SERVER_SECTION!r} must be a mapping of settings, not {type(value).__name__}"
                )
            for skey, svalue in value.items():
                if not isinstance(skey, str):
                    raise InvalidArgumentError(f"{where}: key {skey!r} under {SERVER_SECTION!r} is not a string")
                found.append((f"{SERVER_SECTION}.{skey}", svalue, source))
        elif isinstance(key, str) and key in BrokerConfig.model_fields:
            found.append((key, value, source))
        else:
            raise _unknown(key, source)
    return found


def _from_env(env: Mapping[str, str]) -> list[tuple[str, Any, str]]:
    found: list[tuple[str, Any, str]] = []
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name in IGNORED_ENV:
            continue
        source = f"environment variable {name}"
        raw = env[name]
        if name.startswith(SERVER_ENV_PREFIX) and len(name) > len(SERVER_ENV_PREFIX):
            found.append((f"{SERVER_SECTION}.{name[len(SERVER_ENV_PREFIX) :].lower()}", raw, source))
            continue
        key = name[len(ENV_PREFIX) :].lower()
        if key not in BrokerConfig.model_fields:
            raise InvalidArgumentError(
                f"invalid configuration: unknown environment variable {name} (no config key {key!r}); "
                f"known keys are {', '.join(BrokerConfig.model_fields)}, or LKSTREAM_SERVER__<KEY> for "
                f"the {SERVER_SECTION!r} section"
            )
        found.append((key, _parse_env(key, raw, source), source))
    return found


def _parse_env(key: str, raw: str, source: str) -> Any:
    annotation = BrokerConfig.model_fields[key].annotation
    text = raw.strip()
    if annotation is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise InvalidArgumentError(
            f"invalid configuration: {key}: {raw!r} is not a boolean (use true/false/1/0) (from {source})"
        )
    if annotation is int:
        try:
            return int(text)
        except ValueError:
            raise InvalidArgumentError(
                f"invalid configuration: {key}: {raw!r} is not an integer (from {source})"
            ) from None
    if annotation is float:
        try:
            return float(text)
        except ValueError:
            raise InvalidArgumentError(
                f"invalid configuration: {key}: {raw!r} is not a number (from {source})"
            ) from None
    return raw


def _from_overrides(overrides: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    found: list[tuple[str, Any, str]] = []
    for key, value in overrides.items():
        source = f"override {key}"
        if value is None:
            continue
        if key.startswith(SERVER_SECTION + ".") and len(key) > len(SERVER_SECTION) + 1:
            found.append((key, value, source))
        elif key in BrokerConfig.model_fields:
            found.append((key, os.fspath(value) if isinstance(value, os.PathLike) else value, source))
        else:
            raise _unknown(key, source)
    return found


def _describe(exc: ValidationError, sources: Mapping[str, str]) -> str:
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        if key:
            where = sources.get(key, "default")
            problems.append(f"{key}: {err['msg']} (got {err['input']!r}, from {where})")
        else:  # a cross-field check: name every field it mentions, with its source
            named = [name for name in BrokerConfig.model_fields if name in err["msg"]]
            where = ", ".join(f"{name} from {sources.get(name, 'default')}" for name in named)
            problems.append(f"{err['msg'].removeprefix('Value error, ')}" + (f" ({where})" if where else ""))
    return "; ".join(problems)
