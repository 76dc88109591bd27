"""The remote client's reconnect rules: addresses, which failures are retried, backoff and its bounds."""

from __future__ import annotations

import random

import grpc
import pytest

from lkstream.client.retry import Attempts, Retry, normalise_address, retry_advice_s, wrong_protocol
from lkstream.errors import BrokerUnavailableError
from lkstream.wire.contract import ERROR_CLASS_KEY, ERROR_DETAIL_KEY


class Failure(grpc.RpcError):
    """What a failed gRPC call raises, with the three accessors the client reads."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(details)
        self._code, self._details, self._trailing = code, details, trailing

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._trailing


REFUSED = Failure(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses; Connection refused")
DROPPED = Failure(grpc.StatusCode.UNAVAILABLE, "Socket closed")
SHUTTING_DOWN = Failure(grpc.StatusCode.UNAVAILABLE, "broker closed", ((ERROR_CLASS_KEY, "BrokerClosedError"),))
HTTP_PORT = Failure(
    grpc.StatusCode.UNAVAILABLE,
    "failed to connect to all addresses; last error: INTERNAL: ipv4:127.0.0.1:8080: Failed parsing HTTP/2 "
    "(Expected SETTINGS frame as the first frame, got frame type 80) (Trying to connect an http1.x server)",
)


def attempts(kind: Retry, *, timeout_s: float | None = 30.0, retries: int | None = None) -> Attempts:
    return Attempts(kind, timeout_s=timeout_s, retries=retries, backoff_s=0.1, backoff_max_s=2.0, rng=random.Random(4))


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("localhost", "localhost:9090"),
        ("127.0.0.1", "127.0.0.1:9090"),
        ("127.0.0.1:9191", "127.0.0.1:9191"),
        ("[::1]", "[::1]:9090"),
        ("[::1]:9191", "[::1]:9191"),
        ("::1", "[::1]:9090"),
        (" host ", "host:9090"),
        ("unix:/run/lk.sock", "unix:/run/lk.sock"),
        ("dns:///lk.example:9090", "dns:///lk.example:9090"),
    ],
)
def test_an_address_without_a_port_gets_the_daemons_default_port(given: str, used: str) -> None:
    assert normalise_address(given) == used


def test_backoff_doubles_from_100ms_up_to_2s_with_jitter() -> None:
    state = attempts(Retry.SAFE)
    delays = []
    for _ in range(8):
        state.count += 1
        delay = state.delay(REFUSED)
        assert delay is not None
        delays.append(delay)
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]
    for delay, ceiling in zip(delays, ceilings, strict=True):
        assert ceiling / 2 <= delay < ceiling


def test_retrying_stops_after_the_retry_timeout_or_the_retry_count() -> None:
    state = attempts(Retry.SAFE, timeout_s=0.0)
    state.count = 1
    assert state.delay(REFUSED) is None
    state = attempts(Retry.SAFE, retries=2)
    for expected in (True, True, False):
        state.count += 1
        assert (state.delay(REFUSED) is not None) is expected


def test_a_timeout_of_none_retries_for_ever() -> None:
    state = attempts(Retry.SAFE, timeout_s=None)
    state.first_failure = -1e9  # an outage that began long ago
    state.count = 5000  # far past where 2.0 ** count overflows
    assert state.delay(REFUSED) == pytest.approx(2.0, rel=0.5)


def test_produce_is_resent_after_a_dropped_connection_but_topic_admin_only_when_unsent() -> None:
    for kind in (Retry.SAFE, Retry.RESEND):
        assert attempts(kind).retriable(DROPPED)
        assert attempts(kind).retriable(REFUSED)
    assert not attempts(Retry.UNSENT).retriable(DROPPED)
    assert attempts(Retry.UNSENT).retriable(REFUSED)


def test_a_daemon_that_is_shutting_down_is_retried_but_no_other_daemon_answer_is() -> None:
    assert attempts(Retry.RESEND).retriable(SHUTTING_DOWN)
    refused = Failure(grpc.StatusCode.UNAVAILABLE, "x", ((ERROR_CLASS_KEY, "BrokerUnavailableError"),))
    assert not attempts(Retry.SAFE).retriable(refused)
    assert not attempts(Retry.SAFE).retriable(Failure(grpc.StatusCode.INVALID_ARGUMENT, "bad"))
    assert not attempts(Retry.SAFE).retriable(Failure(grpc.StatusCode.DEADLINE_EXCEEDED, "slow"))


def test_the_http_port_is_never_retried_and_named_as_such() -> None:
    assert not attempts(Retry.SAFE).retriable(HTTP_PORT)
    error = wrong_protocol("127.0.0.1:8080", HTTP_PORT)
    assert isinstance(error, BrokerUnavailableError)
    assert "HTTP/1.x" in str(error) and "gRPC port" in str(error) and "127.0.0.1:8080" in str(error)
    assert wrong_protocol("127.0.0.1:8080", REFUSED) is None


def test_a_stream_that_made_progress_gets_a_fresh_budget() -> None:
    state = attempts(Retry.SAFE, timeout_s=5.0)
    state.count = 3
    assert state.delay(REFUSED) is not None
    state.first_failure = -1e9
    assert state.delay(REFUSED) is None
    state.reset()
    state.count = 1
    assert state.delay(REFUSED) is not None


OVERLOADED = Failure(
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    "overloaded: the daemon holds 67108864 bytes of requests",
    ((ERROR_CLASS_KEY, "OverloadedError"), (ERROR_DETAIL_KEY, '{"retry_after_ms": 700, "limit": 67108864}')),
)
BACKPRESSURE = Failure(grpc.StatusCode.RESOURCE_EXHAUSTED, "backpressure", ((ERROR_CLASS_KEY, "BackpressureError"),))


@pytest.mark.parametrize("kind", list(Retry))
def test_an_overloaded_answer_is_retried_for_every_call_kind_no_sooner_than_its_advice(kind: Retry) -> None:
    tries = attempts(kind)
    for count in range(1, 6):
        tries.count = count
        delay = tries.delay(OVERLOADED)
        assert delay is not None and 0.7 <= delay <= 2.0  # never below the advice; backoff may wait longer
    assert retry_advice_s(OVERLOADED) == 0.7


def test_other_resource_exhausted_answers_are_not_retried() -> None:
    assert attempts(Retry.SAFE).delay(BACKPRESSURE) is None
    assert retry_advice_s(BACKPRESSURE) is None


def test_overloaded_retries_stop_at_the_time_bound() -> None:
    tries = attempts(Retry.RESEND, timeout_s=0.0)
    tries.count = 1
    assert tries.delay(OVERLOADED) is None
