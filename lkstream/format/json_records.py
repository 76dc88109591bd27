"""The one JSON shape of a record, shared by the CLI (``consume --output json``, ``produce --json``) and HTTP.

A record as JSON (docs/http.md, "The record object")::

    {"topic": "t", "partition": 0, "offset": 7, "timestamp": 1795663613751,
     "key": "user-42", "value": {"base64": "AAEC/w=="}, "headers": [{"key": "source", "value": "web"}]}

* **Bytes.** A key, value or header value is a JSON string when it is UTF-8
  text, an object ``{"base64": "..."}`` for any other bytes, or ``null`` (no key,
  a tombstone value, a header without value). The same rule on input and output,
  as seed 001's HTTP API has it, so whatever is printed can be sent back.
* **Headers** are a list of ``{"key": name, "value": bytes}`` in record order (a
  name may repeat). On input an object ``{"name": value}`` is accepted too.
* **Output fields are accepted on input**, so ``lkstream consume T --output json |
  lkstream produce T2 --json`` copies a topic: ``partition`` is honoured (the
  record goes to that partition), and so is ``timestamp`` by ``lkstream produce
  --json`` (a copy keeps each record's time; the HTTP API ignores it and stamps
  the time of the produce); ``topic`` and ``offset`` are checked for their type
  and otherwise ignored: the target topic is the one the command or request
  names, and the broker assigns offsets.

Pure functions over in-memory values.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any, Final

from lkstream.format.codec import Headers, Record

#: Fields of a printed record, in print order.
OUTPUT_FIELDS: Final = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
#: Output fields that input accepts and ignores (after a type check).
IGNORED_FIELDS: Final = frozenset({"topic", "offset"})
#: Every field input accepts.
INPUT_FIELDS: Final = frozenset(OUTPUT_FIELDS)

_b64encode = base64.b64encode


def bytes_to_json(data: bytes | None, force_base64: bool = False) -> str | dict[str, str] | None:
    """``data`` as a string when it is UTF-8 (unless ``force_base64``), else ``{"base64": ...}``; None stays null."""
    if data is None:
        return None
    if not force_base64:
        try:
            return data.decode()
        except UnicodeDecodeError:
            pass
    return {"base64": _b64encode(data).decode("ascii")}


def json_to_bytes(value: object, what: str) -> bytes | None:
    """A string (as UTF-8), ``{"base64": "..."}`` or null as bytes; ValueError naming ``what`` otherwise."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate from a \\ud800 escape
            raise ValueError(f"{what} is not valid Unicode text") from None
    if isinstance(value, dict) and set(value) == {"base64"} and isinstance(value["base64"], str):
        try:
            return base64.b64decode(value["base64"], validate=True)
        except binascii.Error as exc:
            raise ValueError(f"{what} is not valid base64 ({exc})") from None
    raise ValueError(f'{what} must be a string, {{"base64": "..."}} or null, not {json.dumps(value)[:60]}')


def headers_to_json(headers: Sequence[tuple[str, bytes | None]], force_base64: bool = False) -> list[dict[str, Any]]:
    return [{"key": name, "value": bytes_to_json(value, force_base64)} for name, value in headers]


def headers_from_json(value: object) -> Headers:
    """``[{"key": name, "value": v}, ...]`` or ``{"name": v}`` (null or absent: none) as header pairs."""
    if value is None:
        return []
    if isinstance(value, dict):
        return [(str(name), json_to_bytes(v, f"header {name!r}")) for name, v in value.items()]
    if not isinstance(value, list):
        raise ValueError('"headers" must be a list of {"key": name, "value": value} objects (or an object)')
    headers = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str) or set(item) - {"key", "value"}:
            raise ValueError(f'header {i} must be an object {{"key": name, "value": value}}')
        headers.append((item["key"], json_to_bytes(item.get("value"), f"header {item['key']!r}")))
    return headers


def record_to_json(record: Record, force_base64: bool = False) -> dict[str, Any]:
    """``record`` with every :data:`OUTPUT_FIELDS` field."""
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": bytes_to_json(record.key, force_base64),
        "value": bytes_to_json(record.value, force_base64),
        "headers": headers_to_json(record.headers, force_base64),
    }


def check_ignored_fields(obj: dict[str, Any]) -> None:
    """ValueError unless ``topic`` is a string and ``offset`` and ``timestamp`` integers (when present)."""
    topic = obj.get("topic")
    if topic is not None and not isinstance(topic, str):
        raise ValueError(f'"topic" must be a string, not {json.dumps(topic)[:60]}')
    for name in ("offset", "timestamp"):
        value = obj.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f'"{name}" must be an integer, not {json.dumps(value)[:60]}')


def timestamp_from_json(obj: dict[str, Any]) -> int | None:
    """The record's ``timestamp`` (ms since the epoch) when it has one; ValueError unless a non-negative integer."""
    value = obj.get("timestamp")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(
            f'"timestamp" must be a non-negative integer (ms since the epoch), not {json.dumps(value)[:60]}'
        )
    return value
