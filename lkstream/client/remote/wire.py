"""The client's stub: ``ProduceRequest`` serialised once, straight from the encoded batch.

A produce batch is encoded into a ``bytearray`` (the C encoder). Through the generated
stub it was copied three times more before gRPC took it: ``bytes(batch)`` (protobuf
accepts only ``bytes``), into the message, and out again by ``SerializeToString``;
each copy of a 1 MiB batch is a page-faulting allocation when glibc has handed the
previous one back (docs/benchmarks-notes.md, "glibc and request buffers").
:func:`produce_request` writes the message's wire form directly (the same bytes
``SerializeToString`` gives, a test compares them), with one copy of the batch, and
:class:`ClientStub` sends such bytes on ``Produce`` and ``ProduceStream`` as they are.
"""

from __future__ import annotations

from typing import Any, Final

from lkstream.errors import InvalidArgumentError
from lkstream.format.varint import uvarint
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire._proto import messaging_pb2_grpc as pb_grpc

_SERVICE: Final = "/lkstream.Broker/"
# ProduceRequest's fields (proto/messaging.proto): topic = 1 (string), partition = 4 (optional uint32),
# record_batch = 5 (bytes); a tag is (field number << 3) | wire type (2: length-delimited, 0: varint).
_TOPIC_TAG: Final = b"\x0a"
_PARTITION_TAG: Final = b"\x20"
_BATCH_TAG: Final = b"\x2a"
_UINT32_LIMIT: Final = 1 << 32


def produce_request(topic: str, partition: int | None, batch: bytes | bytearray | memoryview) -> bytes:
    """The serialised ``ProduceRequest(topic, partition, record_batch=batch)``, with one copy of ``batch``."""
    if partition is not None and not 0 <= partition < _UINT32_LIMIT:
        raise InvalidArgumentError(f"partition must be a non-negative integer, got {partition!r}")
    name = topic.encode()
    parts: list[Any] = []
    if name:  # proto3 leaves empty strings and bytes out
        parts += [_TOPIC_TAG, uvarint(len(name)), name]
    if partition is not None:  # optional: present even when 0
        parts += [_PARTITION_TAG, uvarint(partition)]
    if len(batch):
        parts += [_BATCH_TAG, uvarint(len(batch)), batch]
    return b"".join(parts)


class ClientStub(pb_grpc.BrokerStub):
    """The generated stub, but ``Produce`` and ``ProduceStream`` take :func:`produce_request`'s bytes."""

    def __init__(self, channel: Any) -> None:
        super().__init__(channel)  # type: ignore[no-untyped-call]
        answer = pb.ProduceResponse.FromString
        # No request serializer: gRPC sends bytes as they are.
        self.Produce = channel.unary_unary(_SERVICE + "Produce", response_deserializer=answer)
        self.ProduceStream = channel.stream_stream(_SERVICE + "ProduceStream", response_deserializer=answer)
