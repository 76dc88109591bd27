"""The call plumbing of :class:`~lkstream.client.remote.broker.RemoteBroker` (a mixin): one RPC, retried as
:mod:`lkstream.client.retry` decides, with errors mapped to :mod:`lkstream.errors` classes.

``_call`` (blocking, any thread) and ``_acall`` (asyncio, one channel per event
loop) retry ``UNAVAILABLE`` failures with backoff; an outage is logged once when
it starts and once when it ends (WARNING, which the CLI shows on stderr).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Final

import grpc

from lkstream.client.remote.wire import ClientStub
from lkstream.client.retry import (
    Attempts,
    Retry,
    closed_by_peer,
    kafka_listener_error,
    retry_advice_s,
    wrong_protocol,
)
from lkstream.errors import BrokerUnavailableError, InvalidArgumentError, LkstreamError
from lkstream.security.tls import ClientTls
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire.contract import error_from_status

log = logging.getLogger("lkstream.client")

#: The embedded ``Broker.fetch``'s default (``lkstream.broker.partition.DEFAULT_FETCH_BYTES``, a test keeps them
#: equal): that module pulls in the broker's partition machinery, which a client process never runs.
DEFAULT_FETCH_BYTES: Final = 1024 * 1024


class RemoteCalls:
    """Mixin of RemoteBroker: the attributes below are set by its constructor."""

    address: str
    timeout: float
    retries: int | None
    retry_timeout_s: float | None
    retry_backoff_s: float
    retry_backoff_max_s: float
    _random: random.Random
    _unavailable_since: float | None
    _reached: bool
    _closed: bool
    _metadata: tuple[tuple[str, str], ...]
    _options: list[tuple[str, Any]]
    _aio: dict[asyncio.AbstractEventLoop, tuple[grpc.aio.Channel, Any]]
    _tls: ClientTls | None
    _credentials: grpc.ChannelCredentials | None
    #: Whether the address was asked if it is a Kafka listener (once, before the daemon was reached).
    _probed: bool = False

    def _error(self, exc: grpc.RpcError) -> LkstreamError:
        misdirected = wrong_protocol(self.address, exc)
        if misdirected is not None:
            return misdirected
        call: Any = exc
        code = call.code() if hasattr(call, "code") else grpc.StatusCode.UNKNOWN
        details = (call.details() if hasattr(call, "details") else "") or ""
        trailing = call.trailing_metadata() if hasattr(call, "trailing_metadata") else None
        return error_from_status(code, details, tuple(trailing or ()), self.address)

    def _misdirected(self, exc: grpc.RpcError) -> LkstreamError | None:
        """Before the daemon was ever reached: a clear error when the address is a Kafka listener.

        A closed connection is what a TLS port does to a plaintext client too, so the address is
        asked (once) with a Kafka request rather than guessed from gRPC's words.
        """
        if self._reached or self._probed or not closed_by_peer(exc):
            return None
        self._probed = True
        context = None
        if self._tls is not None:
            try:
                context = self._tls.ssl_context()
            except InvalidArgumentError:
                return None
        return kafka_listener_error(self.address, context, None if self._tls is None else self._tls.server_name)

    def _attempts(self, retry: Retry, deadline: float | None = None) -> Attempts:
        return Attempts(
            retry,
            timeout_s=self.retry_timeout_s,
            retries=self.retries,
            backoff_s=self.retry_backoff_s,
            backoff_max_s=self.retry_backoff_max_s,
            rng=self._random,
            deadline=deadline,
        )

    def _gave_up(self, exc: grpc.RpcError, attempts: int) -> LkstreamError:
        error = self._error(exc)
        if attempts > 1 and isinstance(error, BrokerUnavailableError):
            call: Any = exc
            details = (call.details() if hasattr(call, "details") else "") or ""
            error = BrokerUnavailableError(self.address, f"gave up after {attempts} attempts: {details}")
        if isinstance(error, BrokerUnavailableError) and self._tls is None and "socket closed" in str(error).lower():
            # What a TLS port does to a plaintext client: say so, it is the likely cause.
            reason = str(error).removeprefix(f"cannot reach the lkstream daemon at {self.address}: ")
            error = BrokerUnavailableError(self.address, f"{reason} (does the daemon use TLS? connect with tls=)")
        return error

    def _lost(self, exc: grpc.RpcError, delay: float) -> None:
        """Say once per outage that the daemon went away (the CLI shows WARNING lines on stderr).

        Not while connecting: a daemon never reached is one error at the end, not an outage;
        nor when an overloaded daemon asked to come back later (it is there).
        """
        if retry_advice_s(exc) is not None:
            log.debug("the daemon at %s is overloaded; retrying in %.2f s", self.address, delay)
            return
        if self._reached and self._unavailable_since is None:
            self._unavailable_since = time.monotonic()
            details = ((exc.details() if hasattr(exc, "details") else "") or "").splitlines()
            log.warning(
                "lost the daemon at %s (%s); reconnecting (first retry in %.1f s)",
                self.address,
                details[0] if details else "UNAVAILABLE",
                delay,
            )

    def _back(self) -> None:
        if self._unavailable_since is not None:
            down = time.monotonic() - self._unavailable_since
            self._unavailable_since = None
            log.warning("reconnected to the daemon at %s after %.1f s", self.address, down)

    def _call(
        self,
        method: Any,
        request: Any,
        *,
        timeout: float | None = None,
        retry: Retry = Retry.UNSENT,
        deadline: float | None = None,
    ) -> Any:
        if self._closed:
            raise InvalidArgumentError("this RemoteBroker is closed")
        attempts = self._attempts(retry, deadline)
        while True:
            attempts.count += 1
            limit = timeout or self.timeout
            if deadline is not None:
                limit = max(0.001, min(limit, deadline - time.monotonic()))
            try:
                response = method(request, timeout=limit, metadata=self._metadata)
            except ValueError:
                if self._closed:  # close() in another thread after the check above; gRPC: "closed channel"
                    raise InvalidArgumentError("this RemoteBroker is closed") from None
                raise
            except grpc.RpcError as exc:
                misdirected = self._misdirected(exc)
                if misdirected is not None:
                    raise misdirected from None
                delay = attempts.delay(exc)
                if delay is None or delay <= 0 or self._closed:
                    raise self._gave_up(exc, attempts.count) from None
                self._lost(exc, delay)
                time.sleep(delay)
                continue
            self._back()
            return response

    def _astub(self) -> Any:
        if self._closed:
            raise InvalidArgumentError("this RemoteBroker is closed")
        loop = asyncio.get_running_loop()
        entry = self._aio.get(loop)
        if entry is None:
            channel = (
                grpc.aio.insecure_channel(self.address, options=self._options)
                if self._credentials is None
                else grpc.aio.secure_channel(self.address, self._credentials, options=self._options)
            )
            entry = (channel, ClientStub(channel))
            self._aio[loop] = entry
        return entry[1]

    async def _acall(self, name: str, request: Any, *, retry: Retry = Retry.UNSENT) -> Any:
        attempts = self._attempts(retry)
        while True:
            attempts.count += 1
            try:
                response = await getattr(self._astub(), name)(request, timeout=self.timeout, metadata=self._metadata)
            except grpc.RpcError as exc:
                delay = attempts.delay(exc)
                if delay is None or self._closed:
                    raise self._gave_up(exc, attempts.count) from None
                self._lost(exc, delay)
                await asyncio.sleep(delay)
                continue
            self._back()
            return response


def fetch_request(topic: str, partition: int, offset: int, max_bytes: int) -> pb.FetchRequest:
    if offset < 0:
        raise InvalidArgumentError(f"offset must be non-negative, got {offset}")
    return pb.FetchRequest(topic=topic, partition=partition, offset=offset, max_bytes=max_bytes, raw_batches=True)
