"""``lkstream consume -f FORMAT``: records printed through kcat's format string.

Tokens, as kcat's ``-f`` has them (kcat is the reference; ``tests/integration``
compares the two on the same records)::

    %s  value                      %S  value length, -1 for null
    %k  key                        %K  key length, -1 for null
    %t  topic                      %p  partition
    %o  offset                     %T  timestamp (ms since the epoch)
    %h  headers as name=value,name=value (a null header value prints NULL)
    %R  value length (-1 for null) as a 4-byte big-endian signed integer
    %%  a percent sign
    \\n \\r \\t \\\\    newline, carriage return, tab, backslash
    \\xHH           the byte HH (hexadecimal)

A null key or value prints as nothing, or as ``NULL`` with ``-Z`` (kcat's flag);
an empty one always prints as nothing, so ``%S``/``%K`` tell the two apart. Keys,
values and headers are written as their bytes, unchanged. Nothing is appended:
end the format with ``\\n`` for one record per line.

Pure functions over in-memory values.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Final

from lkstream.errors import InvalidArgumentError
from lkstream.format.codec import Record

Part = Callable[[Record], bytes]

_ESCAPES: Final = {"n": b"\n", "r": b"\r", "t": b"\t", "\\": b"\\"}
_PIECES: Final = re.compile(r"%(.?)|\\x([0-9a-fA-F]{2})|\\(.?)|[^%\\]+", re.DOTALL)
FORMAT_HELP: Final = (
    "kcat's format string: %s value, %k key, %t topic, %p partition, %o offset, %T timestamp (ms), "
    "%h headers (n=v,...), %S/%K value/key length (-1: null), %R binary length, %%, \\n \\t \\r \\xHH"
)


def _text(value: object) -> bytes:
    return str(value).encode()


def _length(data: bytes | None) -> int:
    return -1 if data is None else len(data)


class RecordFormat:
    """A compiled format string: :meth:`render` gives a record's bytes."""

    def __init__(self, fmt: str, *, null: bytes = b"") -> None:
        self.null = null
        self.parts = [self._part(piece) for piece in _PIECES.finditer(fmt)]

    def render(self, record: Record) -> bytes:
        return b"".join(part(record) for part in self.parts)

    def _bytes(self, data: bytes | None) -> bytes:
        return self.null if data is None else data

    def _headers(self, record: Record) -> bytes:
        return b",".join(name.encode() + b"=" + (b"NULL" if value is None else value) for name, value in record.headers)

    def _part(self, piece: re.Match[str]) -> Part:
        token, hexbyte, escape = piece.group(1), piece.group(2), piece.group(3)
        if hexbyte is not None:
            literal = bytes([int(hexbyte, 16)])
            return lambda record: literal
        if escape is not None:
            if escape not in _ESCAPES:
                raise InvalidArgumentError(f"unknown escape \\{escape} in the format ({FORMAT_HELP})")
            escaped = _ESCAPES[escape]
            return lambda record: escaped
        if token is None:
            text = piece.group(0).encode()
            return lambda record: text
        parts: dict[str, Part] = {
            "s": lambda r: self._bytes(r.value),
            "k": lambda r: self._bytes(r.key),
            "S": lambda r: _text(_length(r.value)),
            "K": lambda r: _text(_length(r.key)),
            "R": lambda r: struct.pack(">i", _length(r.value)),
            "t": lambda r: r.topic.encode(),
            "p": lambda r: _text(r.partition),
            "o": lambda r: _text(r.offset),
            "T": lambda r: _text(r.timestamp),
            "h": self._headers,
            "%": lambda r: b"%",
        }
        if token not in parts:
            raise InvalidArgumentError(f"unknown token %{token} in the format ({FORMAT_HELP})")
        return parts[token]
