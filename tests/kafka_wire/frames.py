"""Kafka request frames built from kio's schemas, with one length, count or tagged field at an extreme.

Random bytes rarely get past a request's first field, so a byte fuzzer never reaches the nested
arrays where a decoder allocates (issue 28, finding 1 took 3,000 random frames to hit once). These
frames are well formed field by field (random values, short strings, arrays of 0-3 elements), and
every place that states a size is a :class:`Site`: a string or bytes length, an array count, a
tagged-field section (its count, and a tag's size). :func:`variants` yields the honest frame and,
for each site, the same frame with that one site replaced by an extreme (0, -1, 2^31-1, 2^32-2,
varints at their 5-byte maximum, an over-long varint...). The request header's client id and
tagged fields are sites too.

Used by tests/kafka_wire/test_fuzz.py (a fixed seed, every API and version the listener offers)
and benchmarks/soak/soak_abuse.py (a longer run).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any, Final

from kio.index import load_request_schema
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional

from lkstream.format.varint import uvarint
from lkstream.kafka.bounds import FIXED_SIZES
from lkstream.kafka.protocol import is_flexible


def _varint_max(width: int) -> bytes:
    return b"\xff" * (width - 1) + b"\x7f"


#: Lies per kind of site, as the bytes that replace the honest encoding.
EXTREMES: Final[dict[str, tuple[bytes, ...]]] = {
    "int16": tuple(struct.pack(">h", v) for v in (0, -1, -2, 0x7FFF, -0x8000, 0x4000)),
    "int32": tuple(struct.pack(">i", v) for v in (0, -1, -2, 2**31 - 1, -(2**31), 2**30, 2**20)),
    "uvarint": (
        b"\x00",  # null
        b"\x01",  # empty
        uvarint(2**31),
        uvarint(2**32 - 1),  # compact length 2^32-2: the 29-byte outage
        uvarint(2**32),
        _varint_max(5),  # 2^35 - 1: the largest 5-byte varint
        _varint_max(6),  # one byte too long
        b"\x80",  # cut short
        uvarint(2**20),
    ),
    # A tagged-field section: lying counts, and one tag whose size lies.
    "tags": (
        _varint_max(5),
        uvarint(2**32 - 1),
        uvarint(2**31),
        b"\x01\x00" + uvarint(2**32 - 1),
        b"\x01\x00" + _varint_max(5),
        b"\x01" + _varint_max(5) + b"\x00",  # an unknown tag of the largest number
        b"\x01\x00\x00",  # a known or unknown tag 0 of size 0
        b"\x02\x00\x01x\x00\x01y",  # tag 0 twice
    ),
}


@dataclass(frozen=True, slots=True)
class Site:
    """A place that states a size: ``honest`` is its real encoding, ``kind`` picks its lies."""

    kind: str
    honest: bytes


Token = bytes | Site


@dataclass(frozen=True, slots=True)
class Frame:
    """One request: ``payload`` (size prefix included) and what it lies about (None: honest)."""

    api_key: int
    version: int
    payload: bytes
    lie: str | None


class RequestBuilder:
    """Random well-formed request bodies of any kio schema, as tokens (bytes and sites)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def entity(self, cls: Any) -> list[Token]:
        flexible = bool(cls.__flexible__)
        tokens: list[Token] = []
        for f in fields(cls):
            if "tag" not in f.metadata:
                tokens.extend(self.field(f, flexible))
        if flexible:
            tokens.append(Site("tags", b"\x00"))
        return tokens

    def field(self, f: Any, flexible: bool) -> list[Token]:
        kind = classify_field(f)
        kafka_type = f.metadata.get("kafka_type")
        if isinstance(kind, EntityTupleField):
            items = [self.entity(kind.type_) for _ in range(self.rng.randint(0, 3))]
            return self.array(items, flexible)
        if isinstance(kind, EntityField):
            return self.entity(kind.type_)
        if isinstance(kind, PrimitiveTupleField):
            items = [self.primitive(kafka_type, flexible, nullable=False) for _ in range(self.rng.randint(0, 3))]
            return self.array(items, flexible)
        return self.primitive(kafka_type, flexible, nullable=is_optional(f))

    def array(self, items: list[list[Token]], flexible: bool) -> list[Token]:
        count = uvarint(len(items) + 1) if flexible else struct.pack(">i", len(items))
        tokens: list[Token] = [Site("uvarint" if flexible else "int32", count)]
        for item in items:
            tokens.extend(item)
        return tokens

    def primitive(self, kafka_type: str, flexible: bool, *, nullable: bool) -> list[Token]:
        if kafka_type in FIXED_SIZES:
            return [self.fixed(kafka_type)]
        if nullable and self.rng.random() < 0.2:
            return [self.null(kafka_type, flexible)]
        raw = self.text() if kafka_type == "string" else self.rng.randbytes(self.rng.randint(0, 8))
        if flexible:
            return [Site("uvarint", uvarint(len(raw) + 1)), raw]
        if kafka_type == "string":
            return [Site("int16", struct.pack(">h", len(raw))), raw]
        return [Site("int32", struct.pack(">i", len(raw))), raw]

    @staticmethod
    def null(kafka_type: str, flexible: bool) -> Site:
        if flexible:
            return Site("uvarint", b"\x00")
        if kafka_type == "string":
            return Site("int16", struct.pack(">h", -1))
        return Site("int32", struct.pack(">i", -1))

    def fixed(self, kafka_type: str) -> bytes:
        size = FIXED_SIZES[kafka_type]
        if kafka_type == "bool":
            return bytes([self.rng.randint(0, 1)])
        if size >= 4 and self.rng.random() < 0.5:  # small, plausible numbers as often as random ones
            return self.rng.randint(0, 1000).to_bytes(size, "big")
        return self.rng.randbytes(size)

    def text(self) -> bytes:
        # Short names from a fixed alphabet: never the name of a well-behaved client's topic ("fuzz-*" is
        # longer than 8 characters).
        return "".join(self.rng.choice("abcxyz_.-") for _ in range(self.rng.randint(1, 8))).encode()


def header_tokens(api_key: int, version: int, correlation: int) -> list[Token]:
    tokens: list[Token] = [struct.pack(">hhi", api_key, version, correlation), Site("int16", b"\x00\x04"), b"fuzz"]
    if is_flexible(api_key, version):
        tokens.append(Site("tags", b"\x00"))
    return tokens


def assemble(tokens: list[Token], lie_at: int | None = None, lie: bytes = b"") -> bytes:
    """The frame (size prefix included), with the ``lie_at``-th site encoded as ``lie``."""
    parts: list[bytes] = []
    site = 0
    for token in tokens:
        if isinstance(token, Site):
            parts.append(lie if site == lie_at else token.honest)
            site += 1
        else:
            parts.append(token)
    body = b"".join(parts)
    return struct.pack(">i", len(body)) + body


def variants(api_key: int, version: int, rng: random.Random, *, lies_per_site: int = 1) -> Iterator[Frame]:
    """The honest frame, then ``lies_per_site`` frames per site with that site lying (chosen by ``rng``)."""
    tokens = header_tokens(api_key, version, rng.randint(0, 2**31 - 1))
    tokens += RequestBuilder(rng).entity(load_request_schema(api_key, version))
    yield Frame(api_key, version, assemble(tokens), None)
    sites = [token for token in tokens if isinstance(token, Site)]
    for index, site in enumerate(sites):
        for lie in rng.sample(EXTREMES[site.kind], min(lies_per_site, len(EXTREMES[site.kind]))):
            yield Frame(api_key, version, assemble(tokens, index, lie), f"site {index} ({site.kind}) = {lie.hex()}")


def random_frame(versions: dict[int, tuple[int, int]], rng: random.Random) -> Frame:
    """One frame of a random served API and version: honest, lying at one site, cut short or with a byte flipped."""
    api_key = rng.choice(sorted(versions))
    low, high = versions[api_key]
    version = rng.randint(low, high)
    frames = list(variants(api_key, version, rng))
    frame = rng.choice(frames)
    roll = rng.random()
    if roll < 0.1 and len(frame.payload) > 5:
        cut = rng.randint(5, len(frame.payload) - 1)
        body = frame.payload[4:cut]
        return Frame(api_key, version, struct.pack(">i", len(body)) + body, f"cut at {cut}")
    if roll < 0.2 and len(frame.payload) > 14:
        flipped = bytearray(frame.payload)
        at = rng.randint(14, len(flipped) - 1)
        flipped[at] ^= 1 << rng.randint(0, 7)
        return Frame(api_key, version, bytes(flipped), f"bit flipped at {at}")
    return frame
