"""The bounds walk's cost (issue 28, finding 1): what checking every length and count adds to a request.

No listener: request bodies in memory, encoded by kio from fixed values. Per request shape,
microseconds per request of:

``walk``        ``lkstream.kafka.bounds`` (the generated walk of the request's schema), which the
                listener runs before every kio decode;
``kio_decode``  kio's native reader alone (what the listener ran before);
``both``        the listener's path now: ``kio_codec.decode_request`` (walk, then decode).

The shapes are the listener's common requests: a consumer's Fetch (v11 and v12, 1 and 100
partitions), Metadata of 10 topics, an OffsetCommit of 100 partitions, a JoinGroup. The target:
the walk costs at most 1.5 times kio's decode (a microsecond or less for the small requests,
beside the tens of microseconds a handler takes).

    .venv/bin/python -m benchmarks.micro.micro_request_bounds [--quick] [--runs N]
"""

from __future__ import annotations

import datetime
import os
import timeit
from collections.abc import Callable
from typing import Any

from kio.schema.fetch.v11 import request as fetch11
from kio.schema.fetch.v12 import request as fetch12
from kio.schema.join_group.v7 import request as join7
from kio.schema.metadata.v9 import request as metadata9
from kio.schema.offset_commit.v8 import request as commit8

from benchmarks._common import base_parser, emit, log, machine_facts, summary
from lkstream.kafka import kio_codec
from lkstream.kafka.bounds import request_walk
from lkstream.kafka.protocol import ApiKey

TARGET_RATIO = 1.5
MAX_WAIT = datetime.timedelta(milliseconds=500)


def _fetch(module: Any, partitions: int) -> Any:
    extra = {"last_fetched_epoch": -1} if module is fetch12 else {}
    parts = tuple(
        module.FetchPartition(
            partition=i, current_leader_epoch=-1, fetch_offset=100, log_start_offset=-1, partition_max_bytes=1 << 20,
            **extra,
        )
        for i in range(partitions)
    )  # fmt: skip
    return module.FetchRequest(
        replica_id=-1, max_wait=MAX_WAIT, min_bytes=1, max_bytes=50 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=(module.FetchTopic(topic="orders", partitions=parts),), forgotten_topics_data=(),
        rack_id="",
    )  # fmt: skip


def _shapes() -> dict[str, tuple[int, int, Any]]:
    metadata = metadata9.MetadataRequest(
        topics=tuple(metadata9.MetadataRequestTopic(name=f"topic-{i}") for i in range(10)),
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    commit = commit8.OffsetCommitRequest(
        group_id="group", generation_id_or_member_epoch=3, member_id="member-1", group_instance_id=None,
        topics=(commit8.OffsetCommitRequestTopic(name="orders", partitions=tuple(
            commit8.OffsetCommitRequestPartition(
                partition_index=i, committed_offset=1000, committed_leader_epoch=-1, committed_metadata=""
            )
            for i in range(100)
        )),),
    )  # fmt: skip
    join = join7.JoinGroupRequest(
        group_id="group", session_timeout=datetime.timedelta(seconds=45), rebalance_timeout=datetime.timedelta(
            minutes=5), member_id="", group_instance_id=None, protocol_type="consumer",
        protocols=(join7.JoinGroupRequestProtocol(name="range", metadata=b"\x00" * 40),),
    )  # fmt: skip
    return {
        "fetch_v11_1_partition": (ApiKey.FETCH, 11, _fetch(fetch11, 1)),
        "fetch_v12_1_partition": (ApiKey.FETCH, 12, _fetch(fetch12, 1)),
        "fetch_v12_100_partitions": (ApiKey.FETCH, 12, _fetch(fetch12, 100)),
        "metadata_v9_10_topics": (ApiKey.METADATA, 9, metadata),
        "offset_commit_v8_100_partitions": (ApiKey.OFFSET_COMMIT, 8, commit),
        "join_group_v7": (ApiKey.JOIN_GROUP, 7, join),
    }


def _us(call: Callable[[], object], number: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=5)) / number * 1e6


def _measure(api_key: int, version: int, body: bytes, number: int) -> dict[str, float]:
    walk = request_walk(api_key, version)
    assert walk is not None and walk(body, 0, len(body)) == len(body)
    reader = kio_codec._reader(api_key, version)  # kio's decode alone, for comparison
    return {
        "walk": _us(lambda: walk(body, 0, len(body)), number),
        "kio_decode": _us(lambda: reader(body, 0), number),
        "both": _us(lambda: kio_codec.decode_request(api_key, version, body, 0), number),
    }


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    args = parser.parse_args()
    number = 500 if args.quick else 5000
    raw: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}
    for run in range(args.runs):
        for name, (api_key, version, entity) in _shapes().items():
            body = kio_codec.encode(entity)
            sizes[name] = len(body)
            for measure, value in _measure(api_key, version, body, number).items():
                raw.setdefault(f"{name}_{measure}_us", []).append(value)
        log(f"run {run + 1} done")
    results: dict[str, Any] = {key: summary(values, 3) for key, values in raw.items()}
    ratios = {
        name: round(results[f"{name}_walk_us"]["median"] / results[f"{name}_kio_decode_us"]["median"], 2)
        for name in sizes
    }
    payload = {
        "settings": {"calls_per_measurement": number, "request_bytes": sizes},
        "results": results,
        "walk_over_kio_decode": ratios,
        "meets_target": {name: ratio <= TARGET_RATIO for name, ratio in ratios.items()},
    }
    emit("micro_request_bounds", args, payload, machine_facts(os.getcwd()))


if __name__ == "__main__":
    main()
