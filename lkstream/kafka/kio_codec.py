"""Request decoding and response encoding through ``kio`` (Kafka's message schemas as Python types).

Used for every API except the hot paths (Produce requests, Produce and Fetch
responses), which :mod:`lkstream.kafka.hot` encodes by hand. Readers and
writers are looked up once per ``(api, version)`` and cached.

:func:`error_response` builds a response of any schema with every field at
its zero value and the top-level ``error_code`` set: the answer to a request
that failed as a whole (a handler bug, an unsupported version) when no more
specific answer exists.
"""

from __future__ import annotations

import datetime
import io
import types
import typing
import uuid
from dataclasses import MISSING, fields, is_dataclass
from functools import cache
from typing import Any

from kio.index import api_key_map, load_request_schema, load_response_schema  # type: ignore[attr-defined]
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from lkstream.kafka.bounds import Walk, request_walk
from lkstream.kafka.protocol import FrameError

Entity = Any  # kio's generated dataclasses; typed per API in the handlers


@cache
def request_type(api_key: int, version: int) -> type[Entity]:
    return load_request_schema(api_key, version)


@cache
def response_type(api_key: int, version: int) -> type[Entity]:
    return load_response_schema(api_key, version)


@cache
def _reader(api_key: int, version: int) -> Any:
    return entity_reader(request_type(api_key, version))


@cache
def _decoder(api_key: int, version: int) -> tuple[Walk | None, Any]:
    """The bounds walk and the reader of one request version (one cache lookup per request)."""
    return request_walk(api_key, version), _reader(api_key, version)


@cache
def _writer(cls: Any) -> Any:
    return entity_writer(cls)


def warm_up(versions: dict[int, tuple[int, int]]) -> None:
    """Import and prepare the schemas of every ``api: (min, max)`` version (seconds of imports).

    kio imports a schema module on first use; done by the first request of each API version, that
    import stalls the listener's event loop (tens to hundreds of milliseconds each), so the
    listener runs this in a thread before it binds its port.
    """
    for api_key, (low, high) in versions.items():
        for version in range(low, high + 1):
            try:
                _decoder(api_key, version)
                cls: Any = response_type(api_key, version)
                _writer(cls)
            except Exception:  # a version kio lacks: served by hand or answered UNSUPPORTED_VERSION
                continue


def decode_request(api_key: int, version: int, frame: bytes | memoryview, offset: int) -> Entity:
    """The request body at ``offset`` of ``frame``; :class:`FrameError` if it does not parse.

    Its lengths and counts are checked against the frame first (:mod:`lkstream.kafka.bounds`):
    kio's reader would reserve memory for whatever an array claims.
    """
    walk, read = _decoder(api_key, version)
    if walk is not None:
        walk(frame, offset, len(frame))
    try:
        entity, _size = read(frame, offset)
    except Exception as exc:  # kio raises several types for malformed input; all mean the same here
        raise FrameError(f"malformed {api_key_map.get(api_key, api_key)} v{version} request: {exc}") from None
    return entity


def encode(entity: Entity) -> bytes:
    """The wire bytes of a kio response (or request) entity, without a header."""
    buffer = io.BytesIO()
    cls: Any = type(entity)
    _writer(cls)(buffer, entity)
    return buffer.getvalue()


def error_response(api_key: int, version: int, error_code: int) -> Entity:
    """A response of ``api_key``/``version`` with zero values and top-level ``error_code``."""
    return _zero(response_type(api_key, version), error_code)


def _zero(cls: Any, error_code: int) -> Entity:
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in fields(cls):
        if not f.init:
            continue
        if f.name == "error_code":
            values[f.name] = ErrorCode(error_code)
        elif f.default is not MISSING or f.default_factory is not MISSING:
            continue
        else:
            values[f.name] = _zero_value(hints[f.name], error_code)
    return cls(**values)


def _zero_value(hint: Any, error_code: int) -> Any:
    origin = typing.get_origin(hint)
    if origin is tuple:
        return ()
    if origin in (typing.Union, types.UnionType):
        return None
    if isinstance(hint, type):
        if issubclass(hint, bool):
            return False
        if issubclass(hint, int):
            return 0
        if issubclass(hint, str):
            return ""
        if issubclass(hint, bytes):
            return b""
        if issubclass(hint, datetime.timedelta):
            return datetime.timedelta(0)
        if issubclass(hint, uuid.UUID):
            return uuid.UUID(int=0)
        if is_dataclass(hint):
            return _zero(hint, error_code)
    if hint is float:
        return 0.0
    raise TypeError(f"no zero value for {hint!r}")


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def _init_fields(cls: Any) -> tuple[tuple[str, bool], ...]:
    """``(name, required)`` of each init field."""
    return tuple((f.name, f.default is MISSING and f.default_factory is MISSING) for f in fields(cls) if f.init)


def struct_type(cls: Any, name: str) -> Any:
    """The class of the (maybe nullable) struct field ``name`` of ``cls``."""
    hint = _hints(cls)[name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def item_type(cls: Any, name: str) -> Any:
    """The element class of the array field ``name`` of ``cls`` (``tuple[X, ...]``, maybe nullable)."""
    hint = _hints(cls)[name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.get_args(hint)[0]


def make(cls: Any, **values: Any) -> Entity:
    """Build ``cls`` from ``values``, ignoring fields this version lacks and zeroing required ones not given.

    One call site serves every version of a response: a field added in a later
    version is simply dropped for older ones.
    """
    kwargs: dict[str, Any] = {}
    for name, required in _init_fields(cls):
        if name in values:
            value = values[name]
            kwargs[name] = ErrorCode(value) if name == "error_code" else value
        elif required:
            kwargs[name] = _zero_value(_hints(cls)[name], 0) if name != "error_code" else ErrorCode.none
    return cls(**kwargs)
