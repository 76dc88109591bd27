"""Option parsing and offset planning, without a SparkSession."""

from __future__ import annotations

import pytest

from lkstream.errors import InvalidArgumentError
from lkstream.spark.options import parse_sink_options, parse_source_options
from lkstream.spark.source import _split, rate_limit


def test_offsets_json_and_words_are_parsed() -> None:
    opts = parse_source_options(
        {"bootstrap": "h:1", "subscribe": "a, b", "startingOffsets": '{"a": {"0": 5, "1": -2}}'}, streaming=True
    )
    assert opts.subscription.topics == ("a", "b")
    assert opts.starting == {"a": {0: 5, 1: -2}}
    assert parse_source_options({"path": "/d", "subscribe": "a"}, streaming=True).starting == "latest"
    assert parse_source_options({"path": "/d", "subscribe": "a"}, streaming=False).starting == "earliest"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "a"}, "exactly one of the options bootstrap"),
        ({"path": "/d", "bootstrap": "h:1", "subscribe": "a"}, "exactly one of the options bootstrap"),
        ({"path": "/d"}, "exactly one of the options subscribe"),
        ({"path": "/d", "subscribePattern": "("}, "not a valid regular expression"),
        ({"path": "/d", "assign": '{"a": "0"}'}, "list of partition numbers"),
        ({"path": "/d", "subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, "invalid offset -2"),
        ({"path": "/d", "subscribe": "a", "failOnDataLoss": "maybe"}, "true or false"),
        ({"path": "/d", "subscribe": "a", "kafka.bootstrap.servers": "x"}, "unknown lkstream source option"),
    ],
)
def test_bad_source_options_name_the_problem(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_source_options(options, streaming=False)


def test_stream_only_and_batch_only_options_are_kept_apart() -> None:
    with pytest.raises(InvalidArgumentError, match="batch queries only"):
        parse_source_options({"path": "/d", "subscribe": "a", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(InvalidArgumentError, match="streaming queries only"):
        parse_source_options({"path": "/d", "subscribe": "a", "maxOffsetsPerTrigger": "5"}, streaming=False)


def test_sink_options() -> None:
    assert parse_sink_options({"bootstrap": "h:1", "topic": "t"}).topic == "t"
    with pytest.raises(InvalidArgumentError, match="read-only"):
        parse_sink_options({"path": "/d"})


def test_rate_limit_shares_the_limit_by_backlog_and_uses_it_up() -> None:
    start = {("t", 0): 0, ("t", 1): 100}
    latest = {("t", 0): 700, ("t", 1): 400, ("u", 0): 0}
    limited = rate_limit(start, latest, 300)
    assert sum(limited[tp] - start.get(tp, 0) for tp in latest) == 300
    assert limited[("t", 0)] - 0 == 210 and limited[("t", 1)] - 100 == 90
    assert rate_limit(start, latest, 10_000) == latest


def test_split_makes_about_min_partitions_contiguous_pieces() -> None:
    pieces = _split([(("t", 0), 0, 1000, True), (("t", 1), 0, 10, True)], 4)
    assert [(a, b) for tp, a, b, _ in pieces if tp == ("t", 0)] == [(0, 250), (250, 500), (500, 750), (750, 1000)]
    assert [(a, b) for tp, a, b, _ in pieces if tp == ("t", 1)] == [(0, 10)]


def test_credentials_for_a_daemon_with_access_control_are_parsed() -> None:
    opts = parse_source_options(
        {"bootstrap": "h:1", "subscribe": "a", "token": "lkst_x", "tlsCa": "/ca.pem", "tlsServerName": "broker"},
        streaming=False,
    )
    credentials = opts.access.credentials
    assert credentials.token == "lkst_x"
    assert credentials.tls is not None
    assert (credentials.tls.ca_file, credentials.tls.server_name) == ("/ca.pem", "broker")
    assert "lkst_x" not in repr(opts), "the token must not reach a log line"
    system_cas = parse_sink_options({"bootstrap": "h:1", "tls": "true"}).credentials
    assert system_cas.tls is not None and system_cas.tls.ca_file is None and system_cas.token is None
    plain = parse_sink_options({"bootstrap": "h:1"}).credentials
    assert plain.connect_options() == {"token": None, "tls": None}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bootstrap": "h:1", "tls": "false", "tlsCa": "/ca.pem"}, "need TLS"),
        ({"bootstrap": "h:1", "tlsCert": "/c.pem"}, "both options tlsCert and tlsKey"),
        ({"path": "/d", "token": "lkst_x"}, "for a daemon"),
    ],
)
def test_bad_credential_options_name_the_problem(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_source_options({"subscribe": "a", **options}, streaming=False)
