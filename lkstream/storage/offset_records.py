"""The records of the offsets journal (``offsets/commits.log``): their bytes, parsing and replay.

Pure functions over bytes (no file, no lock); :mod:`lkstream.storage.offset_journal` writes and
follows the file. The layout is in that module's docstring and docs/format.md, "Offsets journal".
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable

import crc32c

from lkstream.errors import CorruptRecordError, LkstreamError
from lkstream.storage.names import validate_group, validate_topic
from lkstream.storage.offset_files import Committed, Key, Value, is_count, is_topic_id

#: "LKOJ" + format version 1 (u32 BE).
JOURNAL_MAGIC = b"LKOJ\x00\x00\x00\x01"
RECORD_HEADER = struct.Struct(">II")
#: A payload is at least ``{}``; zero-filled garbage must never look like a valid empty record.
MIN_PAYLOAD = 2

#: One change: (group, topic, partition, offset, topic id hex or None, metadata); offset None deletes the key.
Entry = tuple[str, str, int, int | None, str | None, str]


def encode_record(ms: int, entries: Iterable[Entry]) -> bytes:
    """One journal record: length, CRC-32C of the payload, JSON payload."""
    payload = json.dumps({"ms": ms, "e": [_entry_json(e) for e in entries]}, separators=(",", ":")).encode()
    return RECORD_HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload


def _record_length(data: bytes, pos: int) -> int | None:
    """Total length of a valid record at ``pos``, or None if it is incomplete or damaged."""
    if len(data) - pos < RECORD_HEADER.size + MIN_PAYLOAD:
        return None
    length: int
    crc: int
    length, crc = RECORD_HEADER.unpack_from(data, pos)
    start = pos + RECORD_HEADER.size
    if length < MIN_PAYLOAD or start + length > len(data) or data[start] != ord("{"):
        return None
    if crc32c.crc32c(data[start : start + length]) != crc:
        return None
    return RECORD_HEADER.size + length


def _valid_record_after(data: bytes, pos: int) -> int | None:
    """Position of any valid record starting after ``pos`` (payloads start with ``{``)."""
    brace = data.find(b"{", pos + RECORD_HEADER.size + 1)
    while brace >= 0:
        candidate = brace - RECORD_HEADER.size
        if _record_length(data, candidate) is not None:
            return candidate
        brace = data.find(b"{", brace + 1)
    return None


def _parse_payload(payload: bytes, path: str, position: int) -> tuple[int, list[Entry]]:
    def bad(reason: str) -> CorruptRecordError:
        return CorruptRecordError(f"offsets journal record: {reason}", path=path, position=position)

    try:
        doc = json.loads(payload)
    except ValueError as exc:
        raise bad(f"payload is not JSON ({exc})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("ms"), int) or not isinstance(doc.get("e"), list):
        raise bad("payload is not {'ms': int, 'e': [...]}")
    entries: list[Entry] = []
    for item in doc["e"]:
        if not (isinstance(item, list) and len(item) in (4, 5, 6)):
            raise bad(f"entry {item!r} is not [group, topic, partition, offset(, topic_id(, metadata))]")
        group, topic, pid, offset = item[:4]
        topic_id = item[4] if len(item) >= 5 else None
        metadata = item[5] if len(item) == 6 else ""
        if not (topic_id is None or is_topic_id(topic_id)):
            raise bad(f"entry {item!r} has a bad topic id")
        if not isinstance(metadata, str):
            raise bad(f"entry {item!r} has a metadata that is not a string")
        try:
            validate_group(group)
            validate_topic(topic)
        except LkstreamError as exc:
            raise bad(str(exc)) from exc
        if not is_count(pid) or not (offset is None or is_count(offset)):
            raise bad(f"entry {item!r} has a bad partition or offset")
        entries.append((group, topic, pid, offset, topic_id, metadata))
    return doc["ms"], entries


def scan_records(data: bytes, path: str, base: int = 0) -> tuple[list[tuple[int, list[Entry]]], int]:
    """Parse the records in ``data`` (file bytes from position ``base``, after the magic).

    Returns ``([(ms, entries), ...], valid_end)`` where ``valid_end`` (relative to
    ``data``) is where the valid prefix stops: a torn tail starts there. Raises
    :class:`CorruptRecordError` if a bad record is followed by a valid one.
    """
    records: list[tuple[int, list[Entry]]] = []
    pos = 0
    while pos < len(data):
        length = _record_length(data, pos)
        if length is None:
            later = _valid_record_after(data, pos)
            if later is not None:
                raise CorruptRecordError(
                    f"offsets journal record is damaged but a valid record follows at byte {base + later}",
                    path=path,
                    position=base + pos,
                )
            break
        start = pos + RECORD_HEADER.size
        records.append(_parse_payload(data[start : pos + length], path, base + pos))
        pos += length
    return records, pos


def _entry_json(entry: Entry) -> list[object]:
    """An entry as its JSON list: four elements without a topic id (as before issue 12), five with
    one, six with a metadata string (as before issue 24 when it is empty)."""
    if entry[5]:
        return list(entry)
    return list(entry[:5]) if entry[4] is not None else list(entry[:4])


def apply_entries(values: dict[Key, Value], ms: int, entries: Iterable[Entry]) -> None:
    for group, topic, pid, offset, topic_id, metadata in entries:
        if offset is None:
            values.pop((group, topic, pid), None)
        else:
            values[(group, topic, pid)] = Committed(offset, ms, topic_id, metadata)


def check_magic(head: bytes, path: str) -> None:
    if head != JOURNAL_MAGIC:
        raise CorruptRecordError(f"offsets journal starts with {head!r}, not {JOURNAL_MAGIC!r}", path=path, position=0)
