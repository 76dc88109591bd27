"""The OpenAPI 3.1 document of the HTTP JSON API (``GET /openapi.json``), built from the models that validate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from lkstream.server.http.errors import JSON_TYPE
from lkstream.server.http.models import (
    API_VERSION,
    GROUP_PATTERN,
    TOPIC_PATTERN,
    AlterTopicConfigsRequest,
    ConsumeRequest,
    ConsumeResponse,
    CreatePartitionsRequest,
    CreateTopicRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    ErrorResponse,
    EventProduced,
    GroupOffsets,
    ProduceErrorResponse,
    ProduceRequest,
    ProduceResponse,
    TopicConfigs,
    TopicInfo,
    TopicList,
    _Request,
)
from lkstream.storage.names import MAX_GROUP_ID_BYTES, MAX_NAME_LENGTH

_MODELS: Final[Sequence[type[BaseModel]]] = (
    EventProduced,
    ProduceRequest,
    ProduceResponse,
    ProduceErrorResponse,
    ConsumeRequest,
    ConsumeResponse,
    CreateTopicRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    TopicInfo,
    TopicList,
    AlterTopicConfigsRequest,
    CreatePartitionsRequest,
    TopicConfigs,
    GroupOffsets,
    ErrorResponse,
)


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(model: type[BaseModel], description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON_TYPE: {"schema": _ref(model)}}}


_ERRORS: Final = {
    400: "Malformed request (bad JSON, wrong types, invalid names or base64, bad partition).",
    404: "Unknown topic.",
    409: "Conflict (the topic already exists, or max_partitions would be passed).",
    413: "Request body, record or batch too large.",
    416: "Offset out of range: the error carries earliest and latest.",
    429: "Backpressure: too many bytes in flight; see Retry-After.",
    503: "Starting or shutting down; see Retry-After.",
    401: "Authentication on: no bearer token, or an unknown or revoked one (WWW-Authenticate: Bearer).",
    403: "Not allowed: an ACL is missing (the message names it), a foreign Origin, a token over plaintext.",
    415: "The body is not Content-Type: application/json (a form is accepted where the route says so).",
    421: "The Host header is not this server (server.http_allowed_hosts).",
}


def _errors(*statuses: int, model: type[BaseModel] = ErrorResponse) -> dict[str, Any]:
    return {str(s): _json(model, _ERRORS[s]) for s in statuses}


def _path_param(name: str, pattern: str, description: str, max_length: int = MAX_NAME_LENGTH) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "pattern": pattern, "maxLength": max_length},
    }


FORM_TYPE: Final = "application/x-www-form-urlencoded"
_EVENT_FORM: Final = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "description": "The key (UTF-8 text)."},
        "value": {"type": "string", "description": "The value (UTF-8 text)."},
    },
    "required": ["value"],
    "additionalProperties": False,
}


def _partition_param() -> dict[str, Any]:
    return {
        "name": "partition",
        "in": "path",
        "required": True,
        "description": "A partition of server.http_default_topic (100 by default; one past the last is a 400).",
        "schema": {"type": "integer", "minimum": 0},
    }


def _query_param(name: str, description: str, maximum: int) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": "integer", "minimum": 0, "maximum": maximum},
    }


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the JSON API, built from the same models that validate requests."""
    _, top = models_json_schema(
        [(m, "validation" if issubclass(m, _Request) else "serialization") for m in _MODELS],
        ref_template="#/components/schemas/{model}",
    )
    body = {"required": True, "content": {JSON_TYPE: {"schema": {}}}}

    def with_body(model: type[BaseModel]) -> dict[str, Any]:
        return {**body, "content": {JSON_TYPE: {"schema": _ref(model)}}}

    topic = _path_param("topic", TOPIC_PATTERN, "Topic name.")
    group = _path_param(
        "group", GROUP_PATTERN, "Group id: any non-empty string, percent-encoded (as in Kafka).", MAX_GROUP_ID_BYTES
    )
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "LKSTREAM HTTP JSON API",
            "version": API_VERSION,
            "description": "Produce, consume and administer an LKSTREAM daemon over JSON (docs/http.md).",
        },
        "paths": {
            "/produce": {
                "post": {
                    "operationId": "produce",
                    "summary": "Append records to one or more topic-partitions.",
                    "requestBody": with_body(ProduceRequest),
                    "responses": {
                        "200": _json(ProduceResponse, "Offsets per entry; an entry may carry its own error."),
                        **_errors(400, 404, 409, 413, 429, 503, model=ProduceErrorResponse),
                    },
                }
            },
            "/consume": {
                "post": {
                    "operationId": "consume",
                    "summary": "Read records (long poll), optionally as a group that commits.",
                    "requestBody": with_body(ConsumeRequest),
                    "responses": {
                        "200": _json(ConsumeResponse, "Records per partition."),
                        **_errors(400, 404, 413, 416, 503),
                    },
                }
            },
            "/topics": {
                "get": {
                    "operationId": "listTopics",
                    "summary": "Topic names.",
                    "responses": {"200": _json(TopicList, "Topic names, sorted."), **_errors(503)},
                },
                "post": {
                    "operationId": "createTopic",
                    "summary": "Create a topic.",
                    "requestBody": with_body(CreateTopicRequest),
                    "responses": {"201": _json(TopicInfo, "Created."), **_errors(400, 409, 413, 503)},
                },
            },
            "/topics/{topic}": {
                "parameters": [topic],
                "get": {
                    "operationId": "describeTopic",
                    "summary": "Settings and per-partition offsets of a topic.",
                    "responses": {"200": _json(TopicInfo, "The topic."), **_errors(400, 404, 503)},
                },
                "delete": {
                    "operationId": "deleteTopic",
                    "summary": "Delete a topic, its data and its committed offsets.",
                    "responses": {"204": {"description": "Deleted."}, **_errors(400, 404, 503)},
                },
            },
            "/topics/{topic}/delete-records": {
                "parameters": [topic],
                "post": {
                    "operationId": "deleteRecords",
                    "summary": "Kafka's DeleteRecords: move each partition's log start forward (-1: to its end).",
                    "requestBody": with_body(DeleteRecordsRequest),
                    "responses": {
                        "200": _json(DeleteRecordsResponse, "Each partition's log start offset after the call."),
                        **_errors(400, 404, 413, 416, 503),
                    },
                },
            },
            "/topics/{topic}/configs": {
                "parameters": [topic],
                "get": {
                    "operationId": "describeTopicConfigs",
                    "summary": "Every topic config with its value, source and synonyms (Kafka's DescribeConfigs).",
                    "responses": {"200": _json(TopicConfigs, "The configs."), **_errors(400, 404, 503)},
                },
                "patch": {
                    "operationId": "alterTopicConfigs",
                    "summary": "Set and delete config overrides (Kafka's IncrementalAlterConfigs).",
                    "requestBody": with_body(AlterTopicConfigsRequest),
                    "responses": {"200": _json(TopicInfo, "The topic."), **_errors(400, 404, 413, 503)},
                },
            },
            "/topics/{topic}/partitions": {
                "parameters": [topic],
                "post": {
                    "operationId": "createPartitions",
                    "summary": "Grow a topic to more partitions (Kafka's CreatePartitions).",
                    "requestBody": with_body(CreatePartitionsRequest),
                    "responses": {"200": _json(TopicInfo, "The topic."), **_errors(400, 404, 409, 413, 503)},
                },
            },
            "/groups/{group}": {
                "parameters": [group],
                "get": {
                    "operationId": "describeGroup",
                    "summary": "Committed offsets and lag of a group.",
                    "responses": {"200": _json(GroupOffsets, "Per topic-partition."), **_errors(400, 503)},
                },
            },
            "/produce/{partition}": {
                "parameters": [_partition_param()],
                "post": {
                    "operationId": "produceToPartition",
                    "summary": "Seed 003: append one record to a partition of the default topic.",
                    "requestBody": {
                        "required": True,
                        "content": {FORM_TYPE: {"schema": _EVENT_FORM}, JSON_TYPE: {"schema": _EVENT_FORM}},
                    },
                    "responses": {
                        "200": _json(EventProduced, "Where the record went, once acknowledged."),
                        **_errors(400, 409, 413, 429, 503),
                    },
                },
            },
            "/fetch/{partition}": {
                "parameters": [_partition_param()],
                "get": {
                    "operationId": "fetchPartition",
                    "summary": "Seed 003: the records of a partition of the default topic, in order, paged.",
                    "parameters": [
                        _query_param("offset", "First offset (default: the log start).", 2**63 - 1),
                        _query_param("max", "Most records (default 1000).", 10_000),
                    ],
                    "responses": {
                        "200": {
                            "description": "Records; the X-Next-Offset header says where the next page starts.",
                            "content": {
                                JSON_TYPE: {
                                    "schema": {"type": "array", "items": {"$ref": "#/components/schemas/RecordOut"}}
                                }
                            },
                        },
                        **_errors(400, 416, 503),
                    },
                },
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document.",
                    "responses": {"200": {"description": "OpenAPI 3.1.", "content": {JSON_TYPE: {"schema": {}}}}},
                }
            },
        },
        "components": {
            "schemas": top["$defs"],
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "lkst_<id>_<secret>"}},
        },
        # A token is needed only with server.auth on (docs/security.md): either way is valid.
        "security": [{}, {"bearer": []}],
    }
    return _with_access_errors(document)


def _with_access_errors(document: dict[str, Any]) -> dict[str, Any]:
    """Every operation may meet the access checks (lkstream.server.http.access): add their answers."""
    for item in document["paths"].values():
        for method, operation in item.items():
            if method == "parameters":
                continue
            statuses = [401, 403, 421] + ([415] if "requestBody" in operation else [])
            operation["responses"].update(_errors(*statuses))
    return document
