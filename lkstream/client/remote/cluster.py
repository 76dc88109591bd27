"""DescribeCluster for :class:`~lkstream.client.remote.broker.RemoteBroker` (a mixin): the daemon, described."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lkstream.client.remote.calls import RemoteCalls
from lkstream.client.retry import Retry
from lkstream.wire._proto import messaging_pb2 as pb


@dataclass(frozen=True)
class ClusterDescription:
    """Where the daemon listens (an empty address: that listener is off), what it runs and what it holds."""

    server_version: str
    protocol_version: int
    grpc_address: str
    http_address: str
    kafka_address: str
    data_dir: str
    data_bytes: int
    topics: int
    partitions: int
    groups: int
    auto_create_topics: bool
    default_partitions: int
    uptime_s: float
    tls: bool
    auth: bool


class RemoteClusterCalls(RemoteCalls):
    """Mixin of RemoteBroker: its ``_call`` plumbing (:class:`RemoteCalls`) and blocking stub."""

    _stub: Any

    def describe_cluster(self) -> ClusterDescription:
        """The daemon as ``lkstream cluster info`` shows it (needs ``describe`` on the cluster with ACLs)."""
        r: pb.DescribeClusterResponse = self._call(
            self._stub.DescribeCluster, pb.DescribeClusterRequest(), retry=Retry.SAFE
        )
        return ClusterDescription(
            server_version=r.server_version,
            protocol_version=int(r.protocol_version),
            grpc_address=r.grpc_address,
            http_address=r.http_address,
            kafka_address=r.kafka_address,
            data_dir=r.data_dir,
            data_bytes=int(r.data_bytes),
            topics=int(r.topics),
            partitions=int(r.partitions),
            groups=int(r.groups),
            auto_create_topics=r.auto_create_topics,
            default_partitions=int(r.default_partitions),
            uptime_s=float(r.uptime_s),
            tls=r.tls,
            auth=r.auth,
        )
