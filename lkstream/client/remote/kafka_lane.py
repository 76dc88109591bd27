"""The Kafka lane: produce calls and blocking fetches sent to the daemon's Kafka listener.

A gRPC call crosses several threads on each side (gRPC core's reading threads, the
``grpc.aio`` poller, the event loop), and on two cores those hand-offs, not the
append, are most of a small call's time (docs/benchmarks-notes.md, "The produce lane").
The daemon's Kafka listener reads a request on its event loop straight from the
socket, so when the daemon offers it (Handshake's ``kafka_lane_address``) the
remote client sends ``produce_many``'s batches there as one Produce request, and
reads a blocking ``fetch`` there: the blocking methods from the caller's thread on a
socket of their own (:class:`BlockingLane`), the async produce on the caller's event
loop (:class:`AsyncLane`, one connection per loop). Everything else stays on gRPC.

A listener with TLS is reached with the client's own TLS settings (the CA, the
client certificate and the expected server name of its gRPC channel), and one with
SASL with the client's token, sent with SASL OAUTHBEARER when a connection opens
(:class:`LaneSecurity`). The client decides which listeners fit (``RemoteBroker``):
never one without TLS when its gRPC channel has TLS, never one with SASL without a token.

The lane fails as gRPC fails. A connection that cannot be made, is lost or answers
something unreadable raises :class:`LaneUnavailable` with the answers it did get, and
the caller sends the rest of the call through gRPC, whose retries and errors are the
client's contract (a batch whose answer was lost with the connection may be appended
twice: the same at-least-once as a gRPC resend after UNAVAILABLE). No answer within
the client's ``timeout`` raises :class:`LaneTimeout`, which the caller reports as gRPC
reports a deadline, without sending anything again. A listener that stays
unreachable is not tried again for :data:`RETRY_LANE_AFTER_S`. The daemon's own
refusals (a record too large, a missing topic, an offset out of range) are left to
the caller, which asks gRPC again for the error with its class and fields.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from lkstream.wire.kafka_lane import (
    FETCH_ANSWER_OVERHEAD,
    MAX_ANSWER_BYTES,
    AnswerError,
    FetchAnswer,
    PartitionAnswer,
    answer_size,
    correlation_of,
    fetch_request,
    oauthbearer_request,
    parse_answer,
    parse_fetch_answer,
    produce_request,
    sasl_handshake_request,
    sasl_refusal,
)

#: After the listener could not be reached, calls go through gRPC for this long before it is tried again.
RETRY_LANE_AFTER_S: Final = 1.0
#: Connections the blocking lane opens for the caller threads at most (kept open between calls).
CONNECTIONS: Final = 4
#: Bytes written and not yet taken by the kernel past which an async call waits before writing.
WRITE_BUFFER_HIGH: Final = 4 * 1024 * 1024

Answers = dict[int, PartitionAnswer]
T = TypeVar("T")
_QUICKACK: Final = getattr(socket, "TCP_QUICKACK", None)  # Linux only
_IOV_MAX: Final = 1024  # Linux's UIO_MAXIOV, and POSIX's IOV_MAX on every platform this runs on
Batches = Sequence[tuple[int, bytes | bytearray]]


class LaneUnavailable(Exception):
    """The lane could not carry (all of) the call: send what has no answer in ``answers`` through gRPC."""

    def __init__(self, message: str, answers: Answers | None = None) -> None:
        super().__init__(message)
        #: The partitions the listener did answer before the failure (their batches were handled).
        self.answers: Answers = answers or {}


class LaneTimeout(Exception):
    """No answer within the client's timeout: what was sent may or may not be appended (gRPC's deadline)."""


def correlation_ids(start: int = 1) -> Iterator[int]:
    """``start``, ... 2**31 - 1, then 1, 2, ... again: Kafka's correlation id is an int32."""
    yield from range(start, 2**31)
    while True:
        yield from range(1, 2**31)


def _timeout_ms(timeout_s: float) -> int:
    return min(int(timeout_s * 1000), 2**31 - 1)  # an int32 on the wire


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class LaneSecurity:
    """How a lane connection proves itself: TLS (``tls``, expecting ``server_name`` in the certificate,
    or else the listener's host) and, for a listener with SASL, ``token`` sent with OAUTHBEARER."""

    tls: ssl.SSLContext | None = None
    server_name: str | None = None
    token: str | None = None

    def opening(self, ids: Iterator[int]) -> list[tuple[int, bytes, bool]]:
        """The SASL requests a new connection sends first: correlation id, frame, and whether it is the
        SaslAuthenticate (whose answer :func:`sasl_refusal` reads differently)."""
        if self.token is None:
            return []
        handshake, authenticate = next(ids), next(ids)
        return [
            (handshake, sasl_handshake_request(handshake), False),
            (authenticate, oauthbearer_request(authenticate, self.token), True),
        ]


#: No security: a listener with neither TLS nor SASL.
OPEN: Final = LaneSecurity()


class LaneState:
    """Where a client's lanes connect, and whether they may now; shared by its lanes.

    ``stale`` is set when a connection is lost: before the next connection the client asks the
    daemon again (Handshake) where its listener is, so that a restarted daemon's listener on
    another port, or a port now held by something else, is never written to.
    """

    def __init__(self, address: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.address = address
        self.security = OPEN
        #: Batch bytes one request may carry (the daemon's ``max_batch_bytes``; its frame limit adds headroom).
        self.request_bytes = 1024 * 1024
        self.stale = False
        self._clock = clock
        self._until = 0.0

    def usable(self) -> bool:
        return bool(self.address) and not self.stale and self._clock() >= self._until

    def unreachable(self) -> None:
        self._until = self._clock() + RETRY_LANE_AFTER_S
        self.stale = True

    def lost(self) -> None:
        self.stale = True

    def confirmed(self, address: str, request_bytes: int, security: LaneSecurity = OPEN) -> None:
        self.address, self.request_bytes, self.security, self.stale = address, request_bytes, security, False


def requests_of(batches: Batches, limit: int) -> list[Batches]:
    """``batches`` cut into requests of at most ``limit`` batch bytes (a larger batch alone)."""
    requests: list[Batches] = []
    current: list[tuple[int, bytes | bytearray]] = []
    size = 0
    for item in batches:
        if current and size + len(item[1]) > limit:
            requests.append(current)
            current, size = [], 0
        current.append(item)
        size += len(item[1])
    if current:
        requests.append(current)
    return requests


class BlockingLane:
    """Produce from any thread on plain sockets: a call takes an idle connection, or opens one (at most
    :data:`CONNECTIONS`; a call that finds them all busy goes through gRPC)."""

    def __init__(self, state: LaneState, *, connect_timeout: float, timeout: float) -> None:
        self.state = state
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self._ids = correlation_ids()
        self._idle: list[socket.socket] = []
        self._open = 0
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._closed = False

    def produce(self, topic: str, batches: Batches) -> Answers:
        """Send ``batches`` of ``topic`` (one request, or several past the request size); the answers by
        partition. Raises :class:`LaneUnavailable` (with the answers of the requests answered before) or
        :class:`LaneTimeout`."""
        answers: Answers = {}

        def exchange(sock: socket.socket) -> Answers:
            for request in requests_of(batches, self.state.request_bytes):
                correlation = next(self._ids)
                _send_all(sock, produce_request(correlation, topic, request, _timeout_ms(self.timeout)))
                answers.update(parse_answer(_read_answer(sock, correlation, MAX_ANSWER_BYTES), topic))
            return answers

        return self._exchange(exchange, answers)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchAnswer:
        """Read ``topic[partition]`` from ``offset`` (answered at once, as gRPC's Fetch without a wait).
        Raises :class:`LaneUnavailable` or :class:`LaneTimeout`."""

        def exchange(sock: socket.socket) -> FetchAnswer:
            correlation = next(self._ids)
            sock.sendall(fetch_request(correlation, topic, partition, offset, max_bytes))
            # At least one whole batch comes back, which may be larger than max_bytes.
            limit = max(max_bytes, self.state.request_bytes) + FETCH_ANSWER_OVERHEAD
            return parse_fetch_answer(_read_answer(sock, correlation, limit, quick_acks=True), topic, partition)

        return self._exchange(exchange)

    def _exchange(self, exchange: Callable[[socket.socket], T], answered: Answers | None = None) -> T:
        sock = self._take()
        try:
            result = exchange(sock)
        except TimeoutError as exc:
            self._discard(sock)  # a late answer must not be read by the next call
            raise LaneTimeout(
                f"no answer from the Kafka listener at {self.state.address} in {self.timeout:g} s"
            ) from exc
        except (OSError, AnswerError) as exc:
            self._discard(sock)
            self.state.lost()
            raise LaneUnavailable(f"Kafka listener at {self.state.address}: {exc}", answered) from exc
        except BaseException:
            self._discard(sock)  # interrupted mid-exchange: the connection's state is unknown
            raise
        self._give_back(sock)
        return result

    def _take(self) -> socket.socket:
        with self._lock:
            if self._closed:
                raise LaneUnavailable("the client is closed")
            if self._pid != os.getpid():  # a forked child: its parent's connections are not its own
                for inherited in self._idle:
                    inherited.close()  # the child's copy of the descriptor; the parent's stays open
                self._idle, self._open, self._pid = [], 0, os.getpid()
            if self._idle:
                return self._idle.pop()
            if self._open >= CONNECTIONS:
                raise LaneUnavailable("every lane connection is busy")
            if not self.state.usable():
                raise LaneUnavailable("the Kafka listener is not known to be reachable now")
            self._open += 1
            address = self.state.address
        host, port = split_address(address)
        try:
            sock = socket.create_connection((host, port), timeout=self.connect_timeout)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock = self._secure(sock, host)
            except BaseException:
                sock.close()
                raise
        except BaseException as exc:
            with self._lock:
                self._open -= 1  # whatever ended the attempt (an interrupt too): the slot is free again
            if not isinstance(exc, OSError | AnswerError):  # ssl.SSLError is an OSError
                raise
            self.state.unreachable()
            raise LaneUnavailable(f"cannot connect to the Kafka listener at {address}: {exc}") from exc
        sock.settimeout(self.timeout)
        return sock

    def _secure(self, sock: socket.socket, host: str) -> socket.socket:
        """TLS and SASL on a new connection, as :attr:`LaneState.security` says (within the connect timeout)."""
        security = self.state.security
        if security.tls is not None:
            sock = security.tls.wrap_socket(sock, server_hostname=security.server_name or host)
        for correlation, request, authenticate in security.opening(self._ids):
            sock.sendall(request)
            refusal = sasl_refusal(_read_answer(sock, correlation, MAX_ANSWER_BYTES), authenticate)
            if refusal is not None:
                raise AnswerError(f"SASL OAUTHBEARER refused: {refusal}")
        return sock

    def _give_back(self, sock: socket.socket) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(sock)
                return
        self._discard(sock)

    def _discard(self, sock: socket.socket) -> None:
        sock.close()
        with self._lock:
            self._open -= 1

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for sock in idle:
            self._discard(sock)


def _send_all(sock: socket.socket, chunks: list[bytes | bytearray]) -> None:
    if isinstance(sock, ssl.SSLSocket):  # no sendmsg: TLS copies each record into its own buffer anyway
        for chunk in chunks:
            sock.sendall(chunk)
        return
    views = [memoryview(chunk) for chunk in chunks]
    while views:
        sent = sock.sendmsg(views[:_IOV_MAX])  # more buffers than IOV_MAX fail with EMSGSIZE
        while sent and views:
            if sent >= len(views[0]):
                sent -= len(views.pop(0))
            else:
                views[0] = views[0][sent:]
                sent = 0


def _read_exactly(sock: socket.socket, size: int, *, quick_acks: bool = False) -> bytearray:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        if quick_acks and _QUICKACK is not None:
            # Linux holds the ACKs of a connection that answers each read with a write (request,
            # answer, request...) up to 40 ms; a megabyte answer outgrows the sender's window and
            # then waits for them: 41 ms per 1 MiB fetch without this, 0.2 ms with it. Re-armed
            # before every read, as the kernel drops it.
            sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionResetError("the Kafka listener closed the connection")
        got += n
    return buf


def _read_answer(sock: socket.socket, correlation: int, limit: int, *, quick_acks: bool = False) -> bytearray:
    frame = _read_exactly(sock, answer_size(_read_exactly(sock, 4), limit), quick_acks=quick_acks)
    if correlation_of(frame) != correlation:
        raise AnswerError("an answer to another request")
    return frame


class _LaneProtocol(asyncio.Protocol):
    """One connection of an :class:`AsyncLane`: answers matched to requests by correlation id."""

    def __init__(self, state: LaneState) -> None:
        self.state = state
        self.transport: asyncio.Transport | None = None
        self.waiting: dict[int, asyncio.Future[bytearray]] = {}
        self.lost: BaseException | None = None
        self._buffer = bytearray()
        self._writable: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        try:
            while len(self._buffer) >= 4:
                size = answer_size(self._buffer)
                if len(self._buffer) < 4 + size:
                    return
                frame = self._buffer[4 : 4 + size]
                del self._buffer[: 4 + size]
                answer = self.waiting.pop(correlation_of(frame), None)
                if answer is None:
                    raise AnswerError("an answer to no request")
                if not answer.done():
                    answer.set_result(frame)
        except AnswerError as exc:
            self._fail(exc)
            assert self.transport is not None
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionResetError("the Kafka listener closed the connection"))

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    async def writable(self) -> None:
        while self._writable is not None:
            await asyncio.shield(self._writable)

    def _fail(self, exc: BaseException) -> None:
        self.lost = self.lost or exc
        self.state.lost()
        self.fail_waiting(LaneUnavailable(f"connection to the Kafka listener lost: {exc}"))
        self.resume_writing()

    def fail_waiting(self, failure: Exception) -> None:
        waiting, self.waiting = self.waiting, {}
        for answer in waiting.values():
            if not answer.done():
                answer.set_exception(failure)


async def _answers_of(sent: list[asyncio.Future[bytearray]], topic: str) -> Answers:
    answers: Answers = {}
    for answer in sent:
        answers.update(parse_answer(await answer, topic))
    return answers


def _answered(sent: list[asyncio.Future[bytearray]], topic: str) -> Answers:
    """The answers among ``sent`` that came (and can be read) before the call failed."""
    answers: Answers = {}
    for answer in sent:
        if answer.done() and not answer.cancelled() and answer.exception() is None:
            with contextlib.suppress(AnswerError):
                answers.update(parse_answer(answer.result(), topic))
    return answers


class AsyncLane:
    """Produce from one event loop on one connection; requests are pipelined, answers matched by id."""

    def __init__(self, state: LaneState, *, connect_timeout: float, timeout: float) -> None:
        self.state = state
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self._ids = correlation_ids()
        self._connection: _LaneProtocol | None = None
        self._socket: socket.socket | None = None
        self._connecting: asyncio.Future[_LaneProtocol] | None = None

    async def produce(self, topic: str, batches: Batches) -> Answers:
        """Send ``batches`` of ``topic`` (one request, or several past the request size, all written
        before the first answer is awaited); the answers by partition. Raises :class:`LaneUnavailable`
        (with the answers that did come) or :class:`LaneTimeout`."""
        connection = await self._connected()
        loop = asyncio.get_running_loop()
        sent: list[asyncio.Future[bytearray]] = []
        try:
            async with asyncio.timeout(self.timeout):  # the wait for room to write counts too
                await connection.writable()
                if connection.lost is not None or connection.transport is None:
                    raise LaneUnavailable(f"connection to the Kafka listener lost: {connection.lost}")
                for request in requests_of(batches, self.state.request_bytes):
                    correlation = next(self._ids)
                    connection.waiting[correlation] = answer = loop.create_future()
                    frame = produce_request(correlation, topic, request, _timeout_ms(self.timeout))
                    connection.transport.writelines(frame)
                    sent.append(answer)
                return await _answers_of(sent, topic)
        except TimeoutError:
            message = f"no answer from the Kafka listener at {self.state.address} in {self.timeout:g} s"
            # As a gRPC stream's deadline: every call waiting on this connection fails the same way.
            self._drop(connection, LaneTimeout(message))
            raise LaneTimeout(message) from None
        except AnswerError as exc:
            self._drop(connection)
            raise LaneUnavailable(str(exc), _answered(sent, topic)) from exc
        except LaneUnavailable as exc:  # the connection was lost: keep what was answered before
            raise LaneUnavailable(str(exc), _answered(sent, topic)) from exc

    async def _connected(self) -> _LaneProtocol:
        connection = self._connection
        if connection is not None and connection.lost is None:
            return connection
        if self._connecting is None:
            if not self.state.usable():
                raise LaneUnavailable("the Kafka listener is not known to be reachable now")
            self._connecting = asyncio.ensure_future(self._connect())
        try:
            return await asyncio.shield(self._connecting)
        finally:
            if self._connecting is not None and self._connecting.done():
                self._connecting = None

    async def _connect(self) -> _LaneProtocol:
        address = self.state.address
        security = self.state.security
        host, port = split_address(address)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                family, kind, proto, _, target = (await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))[0]
                # The socket is ours, not only the transport's: a lane whose loop was closed (each
                # asyncio.run() ends its own) can still close it (close_now).
                sock = socket.socket(family, kind, proto)
                connection: _LaneProtocol | None = None
                try:
                    sock.setblocking(False)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    await loop.sock_connect(sock, target)
                    _, connection = await loop.create_connection(
                        lambda: _LaneProtocol(self.state),
                        sock=sock,
                        ssl=security.tls,
                        server_hostname=(security.server_name or host) if security.tls is not None else None,
                    )
                    await self._authenticate(connection, security)
                except BaseException:
                    if connection is not None and connection.transport is not None:
                        connection.transport.abort()  # off the selector before the socket closes
                    sock.close()
                    raise
        except (OSError, TimeoutError, AnswerError, LaneUnavailable) as exc:
            self.state.unreachable()
            raise LaneUnavailable(f"cannot connect to the Kafka listener at {address}: {exc}") from exc
        self._connection, self._socket = connection, sock
        return connection

    async def _authenticate(self, connection: _LaneProtocol, security: LaneSecurity) -> None:
        """SASL OAUTHBEARER on a new connection when :attr:`LaneState.security` has a token."""
        loop = asyncio.get_running_loop()
        for correlation, request, authenticate in security.opening(self._ids):
            assert connection.transport is not None
            connection.waiting[correlation] = answer = loop.create_future()
            connection.transport.write(request)
            refusal = sasl_refusal(await answer, authenticate)
            if refusal is not None:
                raise AnswerError(f"SASL OAUTHBEARER refused: {refusal}")

    def _drop(self, connection: _LaneProtocol, failure: Exception | None = None) -> None:
        """Abort ``connection``; the calls still waiting on it fail with ``failure`` (else LaneUnavailable)."""
        self.state.lost()
        if self._connection is connection:
            self._connection = None
        if failure is not None:
            connection.fail_waiting(failure)
        if connection.transport is not None:
            connection.transport.abort()

    def close(self) -> None:
        """Close the connection, on the lane's loop (from another thread: ``loop.call_soon_threadsafe``)."""
        connection, self._connection = self._connection, None
        if connection is not None and connection.transport is not None:
            connection.transport.abort()

    def close_now(self) -> None:
        """Close the socket of a lane whose loop is closed (its transport can no longer close it)."""
        self._connection = None
        if self._socket is not None:
            self._socket.close()
