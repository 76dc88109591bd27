"""DescribeCluster: the daemon as ``lkstream cluster info`` shows it (a mixin of BrokerService).

Where it listens and what it runs come from the daemon (:class:`DaemonFacts`, set once
every listener is bound); what it holds (topics, partitions, bytes, groups) is counted
on each call, in a worker thread: describing every topic touches every partition.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import grpc

from lkstream.broker.broker import Broker
from lkstream.broker.metrics import BrokerMetrics
from lkstream.errors import UnknownTopicError
from lkstream.server.grpc.guard import guard
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire.contract import PROTOCOL_VERSION


@dataclass(frozen=True)
class DaemonFacts:
    """What the daemon tells DescribeCluster about itself: addresses (empty: not listening) and security."""

    version: str = ""
    grpc: str = ""
    http: str = ""
    kafka: str = ""
    tls: bool = False
    auth: bool = False
    started: float = field(default_factory=time.monotonic)


class ClusterRpcs:
    """DescribeCluster."""

    broker: Broker
    metrics: BrokerMetrics
    #: Set by the daemon once its listeners are bound.
    facts: DaemonFacts

    async def DescribeCluster(
        self, request: pb.DescribeClusterRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DescribeClusterResponse:
        async with guard(context, self.metrics):
            return await asyncio.to_thread(self._describe_cluster)
        raise AssertionError("unreachable")  # pragma: no cover

    def _describe_cluster(self) -> pb.DescribeClusterResponse:
        topics = partitions = data_bytes = 0
        for name in self.broker.list_topics():
            try:
                description = self.broker.describe_topic(name)
            except UnknownTopicError:  # deleted while counting
                continue
            topics += 1
            partitions += len(description.partitions)
            data_bytes += sum(stats.size_bytes for stats in description.partitions)
        facts, config = self.facts, self.broker.config
        return pb.DescribeClusterResponse(
            server_version=facts.version,
            protocol_version=PROTOCOL_VERSION,
            grpc_address=facts.grpc,
            http_address=facts.http,
            kafka_address=facts.kafka,
            data_dir=str(self.broker.persist_dir),
            data_bytes=data_bytes,
            topics=topics,
            partitions=partitions,
            groups=len(self.broker.list_groups()),
            auto_create_topics=config.auto_create_topics,
            default_partitions=config.partitions,
            uptime_s=time.monotonic() - facts.started,
            tls=facts.tls,
            auth=facts.auth,
        )
