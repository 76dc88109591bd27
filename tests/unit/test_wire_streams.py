"""A request's failure inside a stream travels as the same status, class and fields as a failed unary call."""

from __future__ import annotations

import grpc
import pytest

from lkstream.errors import (
    BackpressureError,
    BrokerClosedError,
    LkstreamError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnknownTopicError,
)
from lkstream.wire.contract import error_from_status, status_for
from lkstream.wire.streams import StreamAnswer, error_status


@pytest.mark.parametrize(
    "error",
    [
        UnknownTopicError("orders"),
        OffsetOutOfRangeError("orders", 0, 99, 0, 10),
        RecordTooLargeError(2_000_000, 1_048_576),
        BackpressureError(300, 256),
        BrokerClosedError("server is shutting down"),
    ],
)
def test_a_stream_answer_rebuilds_the_error_a_unary_call_would_have_raised(error: LkstreamError) -> None:
    answer = StreamAnswer(error_status(error))
    assert answer.code() is status_for(error)
    rebuilt = error_from_status(answer.code(), answer.details(), answer.trailing_metadata(), "127.0.0.1:9090")
    assert type(rebuilt) is type(error)
    assert str(rebuilt) == str(error)
    for name in ("topic", "partition", "offset", "earliest", "latest", "size", "limit"):
        if hasattr(error, name):
            assert getattr(rebuilt, name) == getattr(error, name), name


def test_an_unknown_status_code_number_is_unknown() -> None:
    from lkstream.wire._proto import messaging_pb2 as pb

    assert StreamAnswer(pb.ErrorStatus(code=999, message="?")).code() is grpc.StatusCode.UNKNOWN
