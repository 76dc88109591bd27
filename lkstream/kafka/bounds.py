"""Every length and count of a request checked against the bytes left, before any decoder allocates.

kio's native reader reserves an array's claimed length before it reads an element: a 29-byte
Metadata v9 frame whose compact array claims 2^32-2 topics made it ask for 34 GB and abort the
process (issue 28, finding 1; the upstream report is in docs/hardening.md). So no request body
reaches kio before :func:`check_request` walked it against the request's schema:

* a string or bytes length must be -1 (null) or fit in the bytes left;
* an array count must be -1 (null) or fit: ``count * smallest element size <= bytes left``
  (Kafka's own readers refuse "a collection of size N, but there are only M bytes remaining";
  an element takes at least a byte), then every element is walked, so a nested array is held to
  the same rule;
* a tagged field's size must fit, and a known tagged field is walked inside its size;
* a varint is at most 5 bytes.

Nothing is allocated from a claimed number: a count only bounds a loop over bytes that exist.
A frame the walk refuses is one Kafka's parser refuses too, and the connection is closed as
Kafka closes it (:class:`LyingRequestError`, a :class:`~lkstream.kafka.protocol.FrameError`).

The walk follows kio's own schema classes (the dataclass fields, their ``kafka_type`` and
``tag`` metadata, ``__flexible__``), so it covers every API and version kio decodes. It is
generated as Python source once per ``(api, version)`` (:func:`walk_source` shows it), one
function with the fields inlined and neighbouring fixed-size fields merged: a walk made of one
closure per field cost three times kio's own decode of a Fetch request.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields
from functools import cache
from typing import Any, Final

from kio.index import load_request_schema
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional

from lkstream.kafka.protocol import FrameError

Buffer = bytes | bytearray | memoryview
#: A compiled walk: the position after the value starting at ``pos``; refuses what runs past ``end``.
Walk = Callable[[Buffer, int, int], int]

#: Wire size of each fixed-width Kafka type kio's schemas use.
FIXED_SIZES: Final[dict[str, int]] = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
#: Variable-size types: a length (int16 for strings, int32 for bytes; in flexible versions an
#: unsigned varint of length + 1), then that many bytes.
_LENGTH_WIDTH: Final[dict[str, int]] = {"string": 2, "bytes": 4, "records": 4}


class LyingRequestError(FrameError):
    """A length or count in a request claims more bytes than the frame holds (or is out of range)."""


def check_request(api_key: int, version: int, buf: Buffer, offset: int) -> None:
    """Walk the request body at ``offset`` of ``buf``; :class:`LyingRequestError` if any length lies.

    ``(api_key, version)`` must have a kio schema (every version the listener serves does).
    """
    walk = request_walk(api_key, version)
    if walk is not None:
        walk(buf, offset, len(buf))


@cache
def request_walk(api_key: int, version: int) -> Walk | None:
    """The compiled walk of one request schema; None when the schema has no array (kio's reader
    allocates only for arrays, and checks string and bytes lengths itself)."""
    cls = load_request_schema(api_key, version)
    if not _has_array(cls):
        return None
    namespace = dict(_RUNTIME)
    exec(compile(walk_source(cls), f"<walk of {cls.__name__} v{version}>", "exec"), namespace)
    walk: Walk = namespace["walk"]
    return walk


def walk_source(cls: Any) -> str:
    """The Python source of the walk of the request schema ``cls`` (a function named ``walk``)."""
    source = _Source()
    source.function("walk", lambda: source.entity(cls))
    return "\n".join(source.functions)


def _has_array(cls: Any) -> bool:
    for f in fields(cls):
        kind = classify_field(f)
        if kind.is_array or (isinstance(kind, EntityField) and _has_array(kind.type_)):
            return True
    return False


@cache
def min_size(cls: Any) -> int:
    """The fewest bytes an entity of ``cls`` takes on the wire (what bounds an array of it)."""
    flexible = bool(cls.__flexible__)
    total = 1 if flexible else 0  # the tagged-field section
    for f in fields(cls):
        if "tag" in f.metadata:
            continue
        kind = classify_field(f)
        kafka_type = f.metadata.get("kafka_type")
        if kind.is_array:
            total += 1 if flexible else 4
        elif isinstance(kind, EntityField):
            total += min_size(kind.type_)
        elif kafka_type in FIXED_SIZES:
            total += FIXED_SIZES[kafka_type]
        else:
            total += 1 if flexible else _length_width(kafka_type, f.name)
    return total


def _fixed_size(cls: Any) -> bool:
    """Whether every entity of ``cls`` has the same size (fixed-width fields only, no tag section)."""
    return not cls.__flexible__ and all(
        not classify_field(f).is_array and f.metadata.get("kafka_type") in FIXED_SIZES for f in fields(cls)
    )


class _Source:
    """Python source of a walk, emitted field by field (``pos`` and ``end`` are the locals)."""

    def __init__(self) -> None:
        self.functions: list[str] = []
        self._lines: list[str] = []
        self._indent = 0
        self._names = 0

    def function(self, name: str, body: Callable[[], None]) -> None:
        outer, self._lines, outer_indent = self._lines, [], self._indent
        self._indent = 0
        self.emit(f"def {name}(buf, pos, end):")
        self._indent = 1
        body()
        self.emit("if pos > end: raise _short(pos - end, pos)")
        self.emit("return pos")
        self.functions.append("\n".join(self._lines))
        self._lines, self._indent = outer, outer_indent

    def emit(self, line: str) -> None:
        self._lines.append("    " * self._indent + line)

    def fresh(self, prefix: str) -> str:
        self._names += 1
        return f"{prefix}{self._names}"

    def entity(self, cls: Any) -> None:
        flexible = bool(cls.__flexible__)
        fixed = 0
        known_tags: dict[int, str] = {}
        for f in fields(cls):
            kind = classify_field(f)
            kafka_type = f.metadata.get("kafka_type")
            if "tag" in f.metadata:
                known_tags[int(f.metadata["tag"])] = self.tagged_field(f, flexible)
            elif not kind.is_array and kafka_type in FIXED_SIZES:
                fixed += FIXED_SIZES[kafka_type]
            else:
                self.skip(fixed)
                fixed = 0
                self.field(f, flexible)
        self.skip(fixed)
        if flexible:
            self.tagged_fields(known_tags)

    def field(self, f: Any, flexible: bool) -> None:
        kind = classify_field(f)
        kafka_type = f.metadata.get("kafka_type")
        if isinstance(kind, EntityTupleField):
            element = kind.type_
            walk_element = None if _fixed_size(element) else lambda: self.entity(element)
            self.array(f.name, flexible, min_size(element), walk_element)
        elif isinstance(kind, EntityField):
            if is_optional(f):  # no request kio knows has one; its presence byte is not walked here
                raise TypeError(f"no bounds check for the nullable struct field {f.name}")
            self.entity(kind.type_)
        elif isinstance(kind, PrimitiveTupleField):
            if kafka_type in FIXED_SIZES:
                self.array(f.name, flexible, FIXED_SIZES[kafka_type], None)
            else:
                smallest = 1 if flexible else _length_width(kafka_type, f.name)
                self.array(f.name, flexible, smallest, lambda: self.sized(f.name, kafka_type, flexible))
        else:
            self.sized(f.name, kafka_type, flexible)

    def skip(self, size: int) -> None:
        # No check here: every later read checks its position against ``end`` before it reads, and
        # the function checks before it returns, so a fixed run past the end is refused either way.
        if size:
            self.emit(f"pos += {size}")

    def sized(self, name: str, kafka_type: Any, flexible: bool) -> None:
        """A string or bytes value: its length, -1 (null) or what fits, then its bytes."""
        if flexible:
            self.uvarint("size")
            self.emit("size -= 1")
        else:
            width = _length_width(kafka_type, name)
            self.emit(f"if pos + {width} > end: raise _short(pos + {width} - end, pos + {width})")
            self.emit(f"size = _int{8 * width}(buf, pos)[0]")
            self.emit(f"pos += {width}")
            self.emit(f"if size < -1: raise _negative({name!r}, size)")
        self.emit("if size > 0:")
        self.emit(f"    if size > end - pos: raise _lying({name!r}, size, 1, end - pos)")
        self.emit("    pos += size")

    def array(self, name: str, flexible: bool, element_size: int, element: Callable[[], None] | None) -> None:
        """An array: its count, -1 (null) or what fits, then each element (``element`` None: every
        element takes ``element_size`` bytes, skipped at once)."""
        count = self.fresh("count")
        smallest = max(element_size, 1)
        if flexible:
            self.uvarint(count)
            self.emit(f"{count} -= 1")
        else:
            self.emit("if pos + 4 > end: raise _short(pos + 4 - end, pos + 4)")
            self.emit(f"{count} = _int32(buf, pos)[0]")
            self.emit("pos += 4")
            self.emit(f"if {count} < -1: raise _negative({name!r}, {count})")
        self.emit(f"if {count} > 0:")
        self._indent += 1
        self.emit(f"if {count} * {smallest} > end - pos: raise _lying({name!r}, {count}, {smallest}, end - pos)")
        if element is None:
            self.emit(f"pos += {count} * {smallest}")
        else:
            self.emit(f"for _ in range({count}):")
            self._indent += 1
            element()
            self._indent -= 1
        self._indent -= 1

    def uvarint(self, target: str) -> None:
        # One byte holds every length below 127: read it inline, call the full reader otherwise.
        self.emit("if pos < end and buf[pos] < 0x80:")
        self.emit(f"    {target} = buf[pos]")
        self.emit("    pos += 1")
        self.emit("else:")
        self.emit(f"    {target}, pos = _uvarint(buf, pos, end)")

    def tagged_fields(self, known: dict[int, str]) -> None:
        self.emit("if pos < end and buf[pos] == 0:")
        self.emit("    pos += 1")
        self.emit("else:")
        known_map = "{" + ", ".join(f"{tag}: {function}" for tag, function in sorted(known.items())) + "}"
        self.emit(f"    pos = _tagged(buf, pos, end, {known_map})")

    def tagged_field(self, f: Any, flexible: bool) -> str:
        """A function walking the tagged field ``f`` inside its own size; its name."""
        name = self.fresh(f"tagged_{f.name}_")
        self.function(name, lambda: self.field(f, flexible))
        return name


def _length_width(kafka_type: Any, name: str) -> int:
    try:
        return _LENGTH_WIDTH[kafka_type]
    except KeyError:
        # A type this walk does not know would pass unchecked: refuse to build the walk instead.
        raise TypeError(f"no bounds check for Kafka type {kafka_type!r} (field {name})") from None


def read_uvarint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (Kafka's limit, and kio's) ending before ``end``."""
    value = 0
    for shift in (0, 7, 14, 21, 28):
        if pos >= end:
            raise LyingRequestError("varint cut short")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
    raise LyingRequestError("varint longer than 5 bytes")


def _tagged(buf: Buffer, pos: int, end: int, known: dict[int, Walk]) -> int:
    """A tagged-field section: each size must fit; a known field must fit inside its own size."""
    count, pos = read_uvarint(buf, pos, end)
    if count * 2 > end - pos:  # a tag and a size take a byte each at least
        raise _lying("tagged fields", count, 2, end - pos)
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos, end)
        size, pos = read_uvarint(buf, pos, end)
        if size > end - pos:
            raise _lying(f"tagged field {tag}", size, 1, end - pos)
        walk = known.get(tag)
        if walk is not None:
            walk(buf, pos, pos + size)
        pos += size
    return pos


def _short(missing: int, pos: int) -> LyingRequestError:
    return LyingRequestError(f"request cut short: {missing} bytes missing before byte {pos}")


def _negative(name: str, length: int) -> LyingRequestError:
    return LyingRequestError(f"{name}: negative length {length}")


def _lying(name: str, count: int, each: int, left: int) -> LyingRequestError:
    unit = "bytes" if each == 1 else f"elements of at least {each} bytes"
    return LyingRequestError(f"{name}: {count} {unit} claimed, {left} bytes left")


#: What generated walks call.
_RUNTIME: Final[dict[str, Any]] = {
    "_int16": struct.Struct(">h").unpack_from,
    "_int32": struct.Struct(">i").unpack_from,
    "_uvarint": read_uvarint,
    "_tagged": _tagged,
    "_short": _short,
    "_negative": _negative,
    "_lying": _lying,
}
