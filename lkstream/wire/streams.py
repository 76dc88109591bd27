"""One request's failure inside a stream that carries many requests (``ProduceStream``, ``FetchStream``).

A unary call fails with a gRPC status and the error's class and fields in
trailing metadata (:mod:`lkstream.wire.contract`). A request on a long-lived
stream cannot end the stream for every request behind it, so the server answers
it with an :class:`ErrorStatus` message carrying the same four things, and the
client turns that back into a :class:`StreamAnswer`: a ``grpc.RpcError`` with
``code()``, ``details()`` and ``trailing_metadata()``, so the retry rules and
the error table treat it exactly as the same failure of a unary call.
"""

from __future__ import annotations

from typing import Any

import grpc

from lkstream.errors import LkstreamError
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire.contract import ERROR_CLASS_KEY, ERROR_DETAIL_KEY, error_metadata, status_for

_CODES = {code.value[0]: code for code in grpc.StatusCode}


def error_status(error: LkstreamError) -> pb.ErrorStatus:
    """``error`` as a stream answer: its status code, message, class and fields."""
    metadata = dict(error_metadata(error))
    return pb.ErrorStatus(
        code=status_for(error).value[0],
        message=str(error),
        error_class=metadata[ERROR_CLASS_KEY],
        detail=metadata[ERROR_DETAIL_KEY],
    )


class StreamAnswer(grpc.RpcError):
    """A failed request of a stream, shaped like the failed unary call it stands for."""

    def __init__(self, status: pb.ErrorStatus) -> None:
        super().__init__(status.message)
        self._code = _CODES.get(status.code, grpc.StatusCode.UNKNOWN)
        self._details = status.message
        self._trailing = ((ERROR_CLASS_KEY, status.error_class), (ERROR_DETAIL_KEY, status.detail))

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:  # pairs, as grpc gives them (its stubs say otherwise)
        return self._trailing
