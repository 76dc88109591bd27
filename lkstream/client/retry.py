"""How the remote client reaches the daemon again: addresses, which failures are retried, and for how long.

A daemon restart (SIGTERM then start, or a crash and a supervisor's restart) looks
to a client like a run of gRPC ``UNAVAILABLE`` failures: "connection refused"
while nothing listens, "server is shutting down" or a daemon-side
``BrokerClosedError`` while it drains. :class:`Attempts` decides, failure by
failure, whether to try again and after how long:

* **Backoff.** Exponential from ``backoff_s`` (100 ms), doubling per attempt,
  capped at ``backoff_max_s`` (2 s), each delay scaled by a random factor in
  [0.5, 1) (jitter, so many clients do not reconnect in lockstep).
* **Bound.** Retrying stops once ``timeout_s`` (30 s by default; None: never)
  has passed since the call's first failure, or after ``retries`` retries when
  that is set, or at the caller's own deadline.
* **What is retried** depends on the call's :class:`Retry` kind: ``SAFE`` calls
  (reads, describes, heartbeats, commits of an offset) are retried after any
  ``UNAVAILABLE``; ``RESEND`` calls (Produce) too, which makes a non-idempotent
  produce **at-least-once**: when the connection dropped after the request was
  sent, the daemon may have appended it and the resend appends it again (a
  duplicate, never a loss); ``UNSENT`` calls (topic create and delete, group
  joins, operator resets) only when the request provably never left the client
  ("connection refused").
* **Overloaded:** ``OverloadedError`` (RESOURCE_EXHAUSTED: the daemon's listeners hold
  ``max_admitted_bytes`` and refused the request before decoding it) is retried for
  every call kind, no sooner than its ``retry_after_ms`` (times a jitter factor in
  [1, 1.5)), within the same time bound.
* **Never retried:** an answer the daemon gave (an error class in the trailing
  metadata), except ``BrokerClosedError`` (it is shutting down and did nothing)
  and ``OverloadedError``;
  and an address that answers HTTP/1.x (the daemon's HTTP port given as
  ``--bootstrap``): that fails at once with a message naming the gRPC port.
  An address that closes the connection before the daemon was ever reached is asked
  once, with a raw Kafka ApiVersions request, whether it is a Kafka listener
  (:func:`kafka_listener_error`): the daemon's Kafka port given as ``--bootstrap``
  fails at once too, instead of after the connect timeout.

:func:`normalise_address` gives a bare host the daemon's default port (9090),
as ``kcat -b localhost`` does for Kafka's 9092; gRPC would otherwise use 443.
"""

from __future__ import annotations

import enum
import json
import random
import socket
import ssl
import struct
import time
from typing import Any, Final

import grpc

from lkstream.errors import BrokerUnavailableError, LkstreamError
from lkstream.wire.contract import ERROR_CLASS_KEY, ERROR_DETAIL_KEY

#: The daemon's gRPC port when an address names none (``server.grpc_port``'s default).
DEFAULT_PORT: Final = 9090
DEFAULT_RETRY_TIMEOUT_S: Final = 30.0
DEFAULT_BACKOFF_S: Final = 0.1
DEFAULT_BACKOFF_MAX_S: Final = 2.0

# Transport failures that mean the request never left the client (safe to retry any RPC).
_NOT_SENT_MARKERS: Final = (
    "failed to connect",
    "connection refused",
    "connect failed",
    "channel is not ready",
    "no ready subchannel",
    "name resolution",
    "dns resolution failed",
)
# What gRPC says when the address answers HTTP/1.x: the daemon's HTTP port, not its gRPC port.
_HTTP1_MARKERS: Final = ("http1.x server", "http/1", "expected settings frame")
# What gRPC says when the peer accepted the connection and closed it: a TLS port to a plaintext
# client, or a port that speaks neither HTTP/2 nor HTTP/1.x (the daemon's Kafka listener).
_CLOSED_MARKERS: Final = ("socket closed", "connection reset", "end of tcp stream", "broken pipe")
#: How long the one Kafka probe of an address may take (connect, send, first answer bytes).
KAFKA_PROBE_TIMEOUT_S: Final = 1.0
# ApiVersions v0 (api key 18), correlation id "LKST", no client id: every Kafka listener answers it,
# before any SASL exchange, with a frame that repeats the correlation id.
_PROBE_CORRELATION: Final = 0x4C4B5354
_KAFKA_PROBE: Final = struct.pack(">ihhih", 10, 18, 0, _PROBE_CORRELATION, -1)
# Daemon answers that mean "nothing was done, I am stopping": retried like a refused connection.
_RETRIABLE_ANSWERS: Final = frozenset({"BrokerClosedError"})
# Daemon answers that mean "nothing was done, come back after retry_after_ms" (RESOURCE_EXHAUSTED).
_REFUSED_UNREAD: Final = frozenset({"OverloadedError"})


class Retry(enum.Enum):
    """Which ``UNAVAILABLE`` failures of a call are retried (see the module docstring)."""

    SAFE = "safe"  # idempotent: any UNAVAILABLE
    RESEND = "resend"  # at-least-once: any UNAVAILABLE, a resend may duplicate
    UNSENT = "unsent"  # only when the request never left the client


def normalise_address(address: str) -> str:
    """``host`` -> ``host:9090``; ``[::1]`` -> ``[::1]:9090``; anything with a port or a scheme as given."""
    address = address.strip()
    if not address or "://" in address or address.startswith(("unix:", "dns:", "ipv4:", "ipv6:")):
        return address
    if address.startswith("["):  # [v6] or [v6]:port
        return address if "]:" in address else f"{address}:{DEFAULT_PORT}"
    if address.count(":") > 1:  # a bare IPv6 literal
        return f"[{address}]:{DEFAULT_PORT}"
    return address if ":" in address else f"{address}:{DEFAULT_PORT}"


def _status(exc: grpc.RpcError) -> tuple[grpc.StatusCode | None, str, dict[str, Any]]:
    call: Any = exc
    code = call.code() if hasattr(call, "code") else None
    details = (call.details() if hasattr(call, "details") else "") or ""
    trailing = call.trailing_metadata() if hasattr(call, "trailing_metadata") else None
    return code, details, dict(trailing or ())


def wrong_protocol(address: str, exc: grpc.RpcError) -> LkstreamError | None:
    """A clear error when ``address`` answered HTTP/1.x (the daemon's HTTP port), else None."""
    code, details, _ = _status(exc)
    if code is not grpc.StatusCode.UNAVAILABLE or not any(m in details.lower() for m in _HTTP1_MARKERS):
        return None
    return BrokerUnavailableError(
        address,
        "it answers HTTP/1.x, so it is an HTTP port (the daemon's JSON/metrics port?); --bootstrap and "
        f"lkstream.connect() take the daemon's gRPC port (server.grpc_port, {DEFAULT_PORT} by default)",
    )


def closed_by_peer(exc: grpc.RpcError) -> bool:
    """Whether ``exc`` says the address accepted the connection and closed it (see :func:`kafka_listener_error`)."""
    code, details, trailing = _status(exc)
    lowered = details.lower()
    return (
        code is grpc.StatusCode.UNAVAILABLE
        and not trailing.get(ERROR_CLASS_KEY)
        and any(marker in lowered for marker in _CLOSED_MARKERS)
    )


def kafka_listener_error(
    address: str, tls: ssl.SSLContext | None = None, server_name: str | None = None
) -> LkstreamError | None:
    """A clear error when ``address`` answers a Kafka ApiVersions request (a Kafka listener), else None.

    One short exchange on a raw socket (with ``tls`` when the client uses TLS), bounded by
    :data:`KAFKA_PROBE_TIMEOUT_S`; anything but a Kafka answer (a TLS alert, a closed
    connection, silence) means "not a Kafka listener".
    """
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=KAFKA_PROBE_TIMEOUT_S) as raw:
            sock = raw if tls is None else tls.wrap_socket(raw, server_hostname=server_name or host)
            sock.sendall(_KAFKA_PROBE)
            answer = b""
            while len(answer) < 8:
                chunk = sock.recv(8 - len(answer))
                if not chunk:
                    return None
                answer += chunk
    except (OSError, ValueError):  # refused, reset, timed out, a TLS failure (ssl.SSLError), a bad port
        return None
    size, correlation = struct.unpack(">ii", answer)
    if correlation != _PROBE_CORRELATION or size < 4:
        return None
    return BrokerUnavailableError(
        address,
        "it answers Kafka's protocol, so this is the Kafka listener (server.kafka_port); --bootstrap and "
        f"lkstream.connect() take the daemon's gRPC port (server.grpc_port, {DEFAULT_PORT} by default), "
        "or use a Kafka client with this address",
    )


def retry_advice_s(exc: grpc.RpcError) -> float | None:
    """The ``retry_after_ms`` an overloaded daemon sent with ``exc`` (in seconds), or None."""
    _, _, trailing = _status(exc)
    raw = trailing.get(ERROR_DETAIL_KEY)
    if not raw:
        return None
    try:
        advice = json.loads(raw).get("retry_after_ms")
    except (ValueError, AttributeError):
        return None
    return advice / 1000.0 if isinstance(advice, int) and advice > 0 else None


class Attempts:
    """The retry state of one call: ``delay(exc)`` says how long to wait before the next attempt, or None."""

    def __init__(
        self,
        kind: Retry,
        *,
        timeout_s: float | None,
        retries: int | None,
        backoff_s: float,
        backoff_max_s: float,
        rng: random.Random,
        deadline: float | None = None,
    ) -> None:
        self.kind = kind
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.rng = rng
        self.deadline = deadline
        self.count = 0  # attempts made so far
        self.first_failure: float | None = None

    def retriable(self, exc: grpc.RpcError) -> bool:
        """Whether this failure may be retried at all, whatever the time left."""
        code, details, trailing = _status(exc)
        if str(trailing.get(ERROR_CLASS_KEY, "")) in _REFUSED_UNREAD:
            return True  # the daemon did nothing and said when to come back: safe for every call kind
        if code is not grpc.StatusCode.UNAVAILABLE:
            return False
        if any(m in details.lower() for m in _HTTP1_MARKERS):
            return False
        answered = str(trailing.get(ERROR_CLASS_KEY, ""))
        if answered:
            return answered in _RETRIABLE_ANSWERS
        if self.kind is Retry.UNSENT:
            return any(marker in details.lower() for marker in _NOT_SENT_MARKERS)
        return True

    def delay(self, exc: grpc.RpcError) -> float | None:
        """Seconds to wait before trying again after ``exc`` (attempt ``count`` failed), or None to give up."""
        now = time.monotonic()
        if self.first_failure is None:
            self.first_failure = now
        if not self.retriable(exc) or (self.retries is not None and self.count > self.retries):
            return None
        # The exponent is capped: 2.0 ** 1100 overflows, and a follower retries for ever.
        backoff = min(self.backoff_max_s, self.backoff_s * (2.0 ** min(self.count - 1, 60)))
        wait = backoff * (0.5 + 0.5 * self.rng.random())
        advice = retry_advice_s(exc)
        if advice is not None:  # never sooner than the daemon asked; jitter spreads the returning clients
            wait = max(wait, advice * (1.0 + 0.5 * self.rng.random()))
        limit = None if self.timeout_s is None else self.first_failure + self.timeout_s
        if self.deadline is not None:
            limit = self.deadline if limit is None else min(limit, self.deadline)
        if limit is not None:
            if now >= limit:
                return None
            wait = min(wait, limit - now)
        return wait

    def reset(self) -> None:
        """A long-lived call (a stream) made progress: the next failure starts a fresh budget."""
        self.count = 0
        self.first_failure = None
