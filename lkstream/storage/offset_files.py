"""The ``.offset`` snapshot files of ``offsets/``: one committed offset per file, named by its key.

A key is ``(group, topic, partition)``. Two kinds of names (docs/format.md, "Offset files"):

* **Readable**, the seed's ``{group}__{topic}__part{pid}.offset``, for a group id that follows
  the rule group ids had before issue 24 (:func:`~lkstream.storage.names.is_plain_group`) when
  the whole name fits in a file name (255 bytes). The first ``__`` ends the group id, the last
  one starts the partition, so the name alone gives the key. Old data directories only have these.
* **Hashed**, ``~{digest}.offset``, for every other key (a group id with a space, ``/``, ``:``,
  ``__``, non-ASCII, over 249 characters; or a name too long for the file system):
  ``digest`` is the first 40 hex digits of the SHA-256 of the JSON text ``[group, topic, pid]``
  (compact separators, ASCII escapes). ``~`` is not in the readable alphabet, so the two kinds
  never collide; the body names its key, and a body whose key does not hash to its file name is
  damaged.

Body: one line of JSON, ``{"offset": N, "committed_ms": T}``, plus ``"topic_id"`` (32 hex digits)
when the offset belongs to one incarnation of the topic, ``"metadata"`` when the commit carried a
non-empty metadata string (issue 24), and ``"group"``, ``"topic"``, ``"partition"`` in hashed files.
Readers ignore fields they do not know, so a file with metadata still loads in older versions.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Any, Final, NamedTuple

from lkstream.errors import CorruptRecordError, LkstreamError
from lkstream.storage.names import is_plain_group, parse_partition_dir, validate_group, validate_topic

log = logging.getLogger("lkstream.storage")

SUFFIX: Final = ".offset"
HASHED_PREFIX: Final = "~"
_DIGEST_HEX: Final = 40
#: Longest file name (bytes) the common Linux file systems accept.
MAX_FILE_NAME_BYTES: Final = 255

Key = tuple[str, str, int]


class Committed(NamedTuple):
    """One key's committed state."""

    offset: int  # the next offset the group reads
    committed_ms: int  # the committer's wall clock
    topic_id: str | None  # the topic incarnation (32 hex digits), None: whatever topic has the name
    metadata: str = ""  # the commit's metadata string (Kafka's OffsetCommit ``committed_metadata``)


#: A key's state, or the error its unreadable snapshot file raises when read.
Value = Committed | CorruptRecordError


def is_topic_id(value: object) -> bool:
    """Whether ``value`` is a topic id as stored: 32 lower-case hex digits."""
    return isinstance(value, str) and len(value) == 32 and all(c in "0123456789abcdef" for c in value)


def _digest(key: Key) -> str:
    text = json.dumps([key[0], key[1], key[2]], separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:_DIGEST_HEX]


def _readable_name(key: Key) -> str | None:
    if not is_plain_group(key[0]):
        return None
    name = f"{key[0]}__{key[1]}__part{key[2]}{SUFFIX}"
    return name if len(name.encode()) <= MAX_FILE_NAME_BYTES else None


def offset_file_name(key: Key) -> str:
    """The snapshot file name of ``key`` (readable when it can be, else hashed)."""
    return _readable_name(key) or f"{HASHED_PREFIX}{_digest(key)}{SUFFIX}"


def is_hashed_name(name: str) -> bool:
    digest = name[len(HASHED_PREFIX) : -len(SUFFIX)]
    return (
        name.startswith(HASHED_PREFIX)
        and name.endswith(SUFFIX)
        and len(digest) == _DIGEST_HEX
        and all(c in "0123456789abcdef" for c in digest)
    )


def parse_offset_file_name(name: str) -> Key | None:
    """The key a readable file name stands for (``"g__orders__part3.offset"`` -> ``("g", "orders", 3)``).

    None for a hashed name (its key is in its body: :func:`read_offset_file`) and for any
    name that no valid key would produce.
    """
    if not name.endswith(SUFFIX) or name.startswith(HASHED_PREFIX):
        return None
    group, _, rest = name[: -len(SUFFIX)].partition("__")
    topic, _, part = rest.rpartition("__")
    pid = parse_partition_dir(part)
    if pid is None or not is_plain_group(group):
        return None
    try:
        validate_topic(topic)
    except LkstreamError:
        return None
    return (group, topic, pid)


def is_offset_file_name(name: str) -> bool:
    return parse_offset_file_name(name) is not None or is_hashed_name(name)


def snapshot_body(key: Key, value: Committed) -> bytes:
    """The file body of ``key`` holding ``value`` (one JSON line)."""
    doc: dict[str, Any] = {"offset": value.offset, "committed_ms": value.committed_ms}
    if value.topic_id is not None:
        doc["topic_id"] = value.topic_id
    if value.metadata:
        doc["metadata"] = value.metadata
    if _readable_name(key) is None:
        doc.update(group=key[0], topic=key[1], partition=key[2])
    return json.dumps(doc).encode() + b"\n"


def read_offset_file(directory: str, name: str) -> tuple[Key | None, Value] | None:
    """The key and value in ``directory/name``; None if ``name`` is no offset file or it vanished.

    An unreadable file gives a :class:`CorruptRecordError` value; its key is None when the file
    is hashed (the key was in the damaged body).
    """
    path = os.path.join(directory, name)
    key = parse_offset_file_name(name)
    if key is None and not is_hashed_name(name):
        return None
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return key, CorruptRecordError(f"unreadable committed offset ({exc})", path=path)
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        if key is None:
            key = _key_in_body(doc, name)
        return key, _value_in_body(doc, path)
    except (ValueError, KeyError, TypeError, LkstreamError) as exc:
        return key, CorruptRecordError(f"unreadable committed offset ({exc})", path=path)


def _key_in_body(doc: dict[str, Any], name: str) -> Key:
    group, topic, pid = doc["group"], doc["topic"], doc["partition"]
    validate_group(group)
    validate_topic(topic)
    if not is_count(pid):
        raise ValueError(f"partition {pid!r} is not a non-negative integer")
    key = (group, topic, pid)
    if offset_file_name(key) != name:
        raise ValueError(f"the body names {key!r}, whose file is {offset_file_name(key)!r}")
    return key


def _value_in_body(doc: dict[str, Any], path: str) -> Value:
    offset = doc["offset"]
    if not is_count(offset):
        return CorruptRecordError(f"committed offset {offset!r} is not a non-negative integer", path=path)
    ms = doc.get("committed_ms", 0)
    topic_id = doc.get("topic_id")
    if not (topic_id is None or is_topic_id(topic_id)):
        return CorruptRecordError(f"topic id {topic_id!r} is not 32 hex digits", path=path)
    metadata = doc.get("metadata", "")
    if not isinstance(metadata, str):
        return CorruptRecordError(f"metadata {metadata!r} is not a string", path=path)
    return Committed(offset, ms if is_count(ms) else 0, topic_id, metadata)


def load_snapshot(directory: str) -> dict[Key, Value]:
    """Every snapshot file of ``directory``; a damaged hashed file (key unknown) is logged and skipped."""
    values: dict[Key, Value] = {}
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return values
    for name in names:
        found = read_offset_file(directory, name)
        if found is None:
            continue
        key, value = found
        if key is None:
            log.warning("skipping %s: %s (lkstream verify reports it)", os.path.join(directory, name), value)
            continue
        values[key] = value
    return values


def is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
