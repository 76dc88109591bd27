"""Option parsing and offset planning, without a SparkSession."""

from __future__ import annotations

import logging

import pytest

from lkstream.errors import InvalidArgumentError
from lkstream.spark.kafka_options import duration_ms
from lkstream.spark.options import parse_sink_options, parse_source_options
from lkstream.spark.progress import offsets_behind_latest
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
        ({"path": "/d", "subscribe": "a", "kafka.bootstrap.servers": "x"}, "exactly one of the options bootstrap"),
        ({"path": "/d", "subscribe": "a", "startingOffsetsByTimestampStrategy": "earliest"}, "must be error or latest"),
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


# -- Spark's Kafka option names (issue 26, item 8) -------------------------------------------------------


def test_kafka_bootstrap_servers_is_bootstrap_and_compression_type_is_the_sink_s_compression() -> None:
    opts = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a"}, streaming=True)
    assert opts.access.bootstrap == "h:1"
    sink = parse_sink_options({"kafka.bootstrap.servers": "h:1", "kafka.compression.type": "zstd", "topic": "t"})
    assert (sink.bootstrap, sink.compression) == ("h:1", "zstd")
    with pytest.raises(InvalidArgumentError, match=r"bootstrap and kafka\.bootstrap\.servers are the same option"):
        parse_source_options({"kafka.bootstrap.servers": "h:1", "bootstrap": "h:2", "subscribe": "a"}, streaming=True)
    with pytest.raises(InvalidArgumentError, match="an LKSTREAM daemon is one address"):
        parse_source_options({"kafka.bootstrap.servers": "h:1,h:2", "subscribe": "a"}, streaming=True)


def test_options_that_only_tune_kafka_s_consumer_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    given = {
        "kafka.bootstrap.servers": "h:1",
        "subscribe": "a",
        "kafka.group.id": "g",
        "groupIdPrefix": "spark-kafka-source",
        "kafka.fetch.max.bytes": "1000",
        "kafkaConsumer.pollTimeoutMs": "512",
        "fetchOffset.numRetries": "3",
        "fetchOffset.retryIntervalMs": "10",
    }
    with caplog.at_level(logging.WARNING, logger="lkstream.spark"):
        opts = parse_source_options(given, streaming=True)
    assert set(opts.ignored) == {
        "kafka.group.id",
        "groupidprefix",
        "kafka.fetch.max.bytes",
        "kafkaconsumer.polltimeoutms",
        "fetchoffset.numretries",
        "fetchoffset.retryintervalms",
    }
    (record,) = [r for r in caplog.records if r.name == "lkstream.spark"]
    assert "ignores option(s) fetchoffset.numretries" in record.getMessage()
    assert "kafka.group.id" in record.getMessage()


@pytest.mark.parametrize("name", ["kafka.security.protocol", "kafka.ssl.truststore.location", "kafka.sasl.mechanism"])
def test_kafka_security_options_are_refused_naming_this_source_s(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match="tlsCa, tlsCert, tlsKey") as info:
        parse_source_options({"bootstrap": "h:1", "subscribe": "a", name: "x"}, streaming=True)
    assert name in str(info.value) and "token" in str(info.value)


def test_min_offsets_per_trigger_and_max_trigger_delay_are_parsed_as_kafka_s() -> None:
    opts = parse_source_options(
        {"path": "/d", "subscribe": "a", "minOffsetsPerTrigger": "100", "maxTriggerDelay": "30s"}, streaming=True
    )
    assert (opts.min_offsets_per_trigger, opts.max_trigger_delay_ms) == (100, 30_000)
    assert parse_source_options({"path": "/d", "subscribe": "a"}, streaming=True).max_trigger_delay_ms == 900_000
    for raw, ms in (("500", 500), ("500ms", 500), ("2m", 120_000), ("1h", 3_600_000), ("1 min", 60_000)):
        assert duration_ms(raw, "maxTriggerDelay") == ms
    with pytest.raises(InvalidArgumentError, match="duration like 15m"):
        parse_source_options({"path": "/d", "subscribe": "a", "maxTriggerDelay": "soon"}, streaming=True)
    with pytest.raises(InvalidArgumentError, match="above maxOffsetsPerTrigger"):
        parse_source_options(
            {"path": "/d", "subscribe": "a", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, streaming=True
        )
    with pytest.raises(InvalidArgumentError, match="streaming queries only"):
        parse_source_options({"path": "/d", "subscribe": "a", "minOffsetsPerTrigger": "10"}, streaming=False)


def test_max_records_per_partition_splits_ranges_as_kafka_s() -> None:
    pieces = _split([(("t", 0), 0, 1000, True), (("t", 1), 0, 10, True)], None, 300)
    assert [(a, b) for tp, a, b, _ in pieces if tp == ("t", 0)] == [(0, 250), (250, 500), (500, 750), (750, 1000)]
    assert [(a, b) for tp, a, b, _ in pieces if tp == ("t", 1)] == [(0, 10)]
    # With minPartitions too: the larger count of the two.
    assert len(_split([(("t", 0), 0, 1000, True)], 8, 300)) == 8


def test_offsets_behind_latest_are_kafka_s_three_metrics() -> None:
    source = {"endOffset": '{"t": {"0": 180, "1": 120}}', "latestOffset": '{"t": {"0": 600, "1": 400}, "u": {"0": 5}}'}
    lag = offsets_behind_latest(source)
    assert lag is not None
    assert (lag.topics, lag.avg, lag.max, lag.min) == (("t", "u"), (420 + 280 + 5) / 3, 420, 5)
    assert lag.as_metrics() == {
        "avgOffsetsBehindLatest": str((420 + 280 + 5) / 3),
        "maxOffsetsBehindLatest": "420",
        "minOffsetsBehindLatest": "5",
    }
    assert offsets_behind_latest({"endOffset": "null", "latestOffset": None}) is None
