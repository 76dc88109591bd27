"""Config APIs: DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).

Topic resources are the topic's configs (:mod:`lkstream.storage.topic_config`): DescribeConfigs
lists every topic config with its value, source, type, and (when asked) synonyms and
documentation, ``read_only`` false as in Kafka; IncrementalAlterConfigs sets, deletes,
appends to and subtracts from them (APPEND and SUBTRACT only for list configs, as Kafka);
AlterConfigs replaces the whole set of overrides (a config not named goes back to its default).
Both honour ``validate_only``. Errors are Kafka's: INVALID_CONFIG for a name Kafka does not
know, a value out of range or one LKSTREAM cannot honour (the message says which);
INVALID_REQUEST for a malformed request (duplicate names, a null value to set, an unknown
operation); UNKNOWN_TOPIC_OR_PARTITION; TOPIC_AUTHORIZATION_FAILED without ``describe_configs``
/ ``alter_configs`` on the topic.

The broker resource (named ``"0"``, or ``""`` for the cluster-wide defaults, which are none) is
:mod:`lkstream.kafka.broker_configs`: readable with ``describe_configs`` on the cluster, and
read-only: altering it answers INVALID_REQUEST, as Kafka does for configs it cannot update
dynamically. Other resource types (broker loggers, client metrics, groups) are INVALID_REQUEST.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from kio.schema.errors import ErrorCode

from lkstream.config import BrokerConfig
from lkstream.errors import LkstreamError
from lkstream.kafka import kio_codec
from lkstream.kafka.broker_configs import broker_entries
from lkstream.kafka.context import NODE_ID, RequestContext
from lkstream.kafka.errors import error_code
from lkstream.kafka.protocol import ApiKey, RequestHeader
from lkstream.kafka.security import CLUSTER_RESOURCE
from lkstream.storage.topic_config import KEYS, ConfigType, TopicConfig

#: Kafka's ConfigResource.Type.
TOPIC_RESOURCE: Final = 2
BROKER_RESOURCE: Final = 4
#: IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType).
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

#: One resource's answer: (error code, message, entries); entries are kio-ready dicts.
Outcome = tuple[int, "str | None", list[dict[str, Any]]]


class _Refused(Exception):
    """A resource's answer is this error (raised inside a handler, answered per resource)."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- DescribeConfigs ------------------------------------------------------------------------------------


async def describe_configs(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    version = header.api_version
    request = kio_codec.decode_request(ApiKey.DESCRIBE_CONFIGS, version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.DESCRIBE_CONFIGS, version)
    result_cls = kio_codec.item_type(response_cls, "results")
    entry_cls = kio_codec.item_type(result_cls, "configs")
    synonym_cls = kio_codec.item_type(entry_cls, "synonyms")
    synonyms_wanted = bool(getattr(request, "include_synonyms", False))
    docs_wanted = bool(getattr(request, "include_documentation", False))
    results = []
    for resource in request.resources:
        try:
            entries = _describe(ctx, int(resource.resource_type), resource.resource_name)
            code, message = 0, None
        except _Refused as refused:
            entries, code, message = [], refused.code, refused.message
        wanted = set(resource.configuration_keys) if resource.configuration_keys else None
        configs = tuple(
            kio_codec.make(
                entry_cls,
                **{key: value for key, value in entry.items() if key not in ("synonyms", "documentation")},
                documentation=entry["documentation"] if docs_wanted else None,
                synonyms=tuple(kio_codec.make(synonym_cls, **s) for s in entry["synonyms"]) if synonyms_wanted else (),
            )
            for entry in entries
            if wanted is None or entry["name"] in wanted
        )
        results.append(
            kio_codec.make(
                result_cls,
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=configs,
            )
        )
    return kio_codec.encode(kio_codec.make(response_cls, results=tuple(results)))


def _describe(ctx: RequestContext, resource_type: int, name: str) -> list[dict[str, Any]]:
    if resource_type == BROKER_RESOURCE:
        if not ctx.allowed("describe_configs", "cluster", CLUSTER_RESOURCE):
            raise _Refused(ErrorCode.cluster_authorization_failed)
        if name == "":
            return []  # the cluster-wide dynamic defaults: LKSTREAM has none
        _check_broker_name(name)
        return [
            _entry(e.name, e.value, int(e.source), e.type, e.documentation, read_only=True, synonyms=[])
            for e in broker_entries(ctx)
        ]
    if resource_type != TOPIC_RESOURCE:
        raise _Refused(ErrorCode.invalid_request, f"resource type {resource_type} has no configs here")
    if not ctx.allowed("describe_configs", "topic", name):
        raise _Refused(ErrorCode.topic_authorization_failed)
    try:
        described = ctx.broker.describe_topic_configs(name)
    except (LkstreamError, KeyError) as exc:
        raise _Refused(ErrorCode.unknown_topic_or_partition, str(exc)) from None
    return [
        _entry(
            e.name,
            e.value,
            int(e.source),
            e.type,
            e.documentation,
            read_only=False,  # topic configs can be altered (Kafka reports false too)
            synonyms=[{"name": s.name, "value": s.value, "source": int(s.source)} for s in e.synonyms],
        )
        for e in described
    ]


def _entry(
    name: str,
    value: str,
    source: int,
    kind: ConfigType,
    documentation: str,
    *,
    read_only: bool,
    synonyms: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "is_default": source == 5,  # v0 only: DEFAULT_CONFIG
        "config_source": source,
        "is_sensitive": False,
        "config_type": int(kind),
        "documentation": documentation,
        "synonyms": synonyms,
    }


def _check_broker_name(name: str) -> None:
    if name != str(NODE_ID):
        raise _Refused(ErrorCode.invalid_request, f"unexpected broker id {name!r}: this node is {NODE_ID}")


# -- AlterConfigs and IncrementalAlterConfigs -------------------------------------------------------------


async def alter_configs(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    """AlterConfigs (33): each topic's overrides become exactly the configs given."""
    return await _alter(ctx, header, frame, ApiKey.ALTER_CONFIGS, incremental=False)


async def incremental_alter_configs(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    """IncrementalAlterConfigs (44): SET, DELETE, APPEND and SUBTRACT per config."""
    return await _alter(ctx, header, frame, ApiKey.INCREMENTAL_ALTER_CONFIGS, incremental=True)


async def _alter(ctx: RequestContext, header: RequestHeader, frame: bytes, api: int, *, incremental: bool) -> bytes:
    request = kio_codec.decode_request(api, header.api_version, frame, header.body_offset)
    response_cls = kio_codec.response_type(api, header.api_version)
    result_cls = kio_codec.item_type(response_cls, "responses")
    seen = [(int(r.resource_type), r.resource_name) for r in request.resources]
    results = []
    for resource in request.resources:
        kind, name = int(resource.resource_type), resource.resource_name
        try:
            if seen.count((kind, name)) > 1:
                raise _Refused(ErrorCode.invalid_request, f"resource {name!r} appears more than once in the request")
            validate_only = bool(request.validate_only)
            await _alter_one(ctx, kind, name, resource.configs, incremental=incremental, validate_only=validate_only)
            code, message = 0, None
        except _Refused as refused:
            code, message = refused.code, refused.message
        results.append(
            kio_codec.make(result_cls, error_code=code, error_message=message, resource_type=kind, resource_name=name)
        )
    return kio_codec.encode(kio_codec.make(response_cls, responses=tuple(results)))


async def _alter_one(
    ctx: RequestContext, kind: int, name: str, configs: Any, *, incremental: bool, validate_only: bool
) -> None:
    if kind == BROKER_RESOURCE:
        if not ctx.allowed("alter_configs", "cluster", CLUSTER_RESOURCE):
            raise _Refused(ErrorCode.cluster_authorization_failed)
        if name != "":
            _check_broker_name(name)
        if configs:
            names = ", ".join(sorted({c.name for c in configs}))
            raise _Refused(
                ErrorCode.invalid_request,
                f"cannot update these configs dynamically: {names} (LKSTREAM's broker settings come from its "
                "configuration file, environment and flags; restart the daemon to change them)",
            )
        return
    if kind != TOPIC_RESOURCE:
        raise _Refused(ErrorCode.invalid_request, f"resource type {kind} has no configs here")
    if not ctx.allowed("alter_configs", "topic", name):
        raise _Refused(ErrorCode.topic_authorization_failed)
    try:
        current = ctx.broker.topic_overrides(name)
    except (LkstreamError, KeyError) as exc:
        raise _Refused(ErrorCode.unknown_topic_or_partition, str(exc)) from None
    if incremental:
        changes, deleted = _changes(current, configs, ctx.broker.config)
    else:
        changes, deleted = _replacement(current, configs)
    try:
        if validate_only:
            current.with_changes(set=changes, delete=deleted).checked(ctx.broker.config)
        else:  # topic.json is rewritten and fsynced: off the event loop
            await asyncio.to_thread(ctx.broker.alter_topic_configs, name, changes, deleted)
    except (LkstreamError, KeyError) as exc:
        code = ErrorCode.unknown_topic_or_partition if isinstance(exc, KeyError) else error_code(exc)
        raise _Refused(code, str(exc)) from None


def _unique(configs: Any) -> None:
    names = [c.name for c in configs]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise _Refused(ErrorCode.invalid_request, f"duplicate config names in one resource: {', '.join(duplicated)}")


def _replacement(current: TopicConfig, configs: Any) -> tuple[dict[str, str | None], list[str]]:
    """AlterConfigs: what to set and delete so that the overrides become exactly ``configs``."""
    _unique(configs)
    for config in configs:
        if config.value is None:
            raise _Refused(ErrorCode.invalid_request, f"null value for config {config.name!r}")
    given = {c.name: c.value for c in configs}
    return given, [name for name in current.overrides if name not in given]


def _changes(current: TopicConfig, configs: Any, broker: BrokerConfig) -> tuple[dict[str, str | None], list[str]]:
    """IncrementalAlterConfigs: the SETs (APPEND and SUBTRACT resolved against the current value) and DELETEs."""
    _unique(configs)
    changes: dict[str, str | None] = {}
    deleted: list[str] = []
    for config in configs:
        operation = int(config.config_operation)
        if operation == DELETE:
            deleted.append(config.name)
        elif operation not in (SET, APPEND, SUBTRACT):
            raise _Refused(ErrorCode.invalid_request, f"unknown config operation {operation} for {config.name!r}")
        elif config.value is None:
            raise _Refused(ErrorCode.invalid_request, f"null value for config {config.name!r}")
        elif operation == SET:
            changes[config.name] = config.value
        else:
            changes[config.name] = _list_change(current, broker, config.name, config.value, append=operation == APPEND)
    return changes, deleted


def _list_change(current: TopicConfig, broker: BrokerConfig, name: str, value: str, *, append: bool) -> str:
    """The new value of list config ``name`` after APPEND or SUBTRACT of the items in ``value`` (from the
    value that applies now: the override, else the broker's default)."""
    key = KEYS.get(name)
    if key is None:
        raise _Refused(
            ErrorCode.invalid_config, f"unknown topic config {name!r}: Kafka has no topic config of that name"
        )
    if key.type is not ConfigType.LIST:
        verb = "append" if append else "subtract"
        raise _Refused(ErrorCode.invalid_config, f"config value {verb} is not allowed for {name!r}: it is not a list")
    try:
        items = list(key.parse(value))
    except ValueError as exc:
        raise _Refused(ErrorCode.invalid_config, f"invalid topic config {name}={value!r}: {exc}") from None
    existing = list(current.value(name, broker))
    merged = existing + [i for i in items if i not in existing] if append else [i for i in existing if i not in items]
    return ",".join(merged)
