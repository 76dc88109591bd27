"""Request handlers, one module per area; :data:`HANDLERS` maps each API key to its handler.

A handler takes the request context, the parsed header and the frame, and
returns the encoded response body, in one piece or in chunks (or None for a Produce with acks=0).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from lkstream.kafka.context import RequestContext
from lkstream.kafka.handlers import cluster, configs, consumer_groups, data, groups, records, sasl
from lkstream.kafka.hot import ResponseBody
from lkstream.kafka.protocol import ApiKey, RequestHeader

Handler = Callable[[RequestContext, RequestHeader, bytes], Awaitable[ResponseBody]]
#: Builds the answer to a request whose handler raised: the error code on every partition it named.
FailureResponse = Callable[[RequestHeader, bytes, int], bytes | None]

HANDLERS: Final[dict[int, Handler]] = {
    ApiKey.PRODUCE: data.produce,
    ApiKey.FETCH: data.fetch,
    ApiKey.LIST_OFFSETS: data.list_offsets,
    ApiKey.INIT_PRODUCER_ID: data.init_producer_id,
    ApiKey.API_VERSIONS: cluster.api_versions,
    ApiKey.METADATA: cluster.metadata,
    ApiKey.CREATE_TOPICS: cluster.create_topics,
    ApiKey.DELETE_TOPICS: cluster.delete_topics,
    ApiKey.DELETE_RECORDS: records.delete_records,
    ApiKey.CREATE_PARTITIONS: cluster.create_partitions,
    ApiKey.DESCRIBE_CONFIGS: configs.describe_configs,
    ApiKey.ALTER_CONFIGS: configs.alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.incremental_alter_configs,
    ApiKey.DESCRIBE_CLUSTER: cluster.describe_cluster,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: cluster.list_partition_reassignments,
    ApiKey.FIND_COORDINATOR: groups.find_coordinator,
    ApiKey.JOIN_GROUP: groups.join_group,
    ApiKey.SYNC_GROUP: groups.sync_group,
    ApiKey.HEARTBEAT: groups.heartbeat,
    ApiKey.LEAVE_GROUP: groups.leave_group,
    ApiKey.OFFSET_COMMIT: groups.offset_commit,
    ApiKey.OFFSET_FETCH: groups.offset_fetch,
    ApiKey.OFFSET_DELETE: groups.offset_delete,
    ApiKey.LIST_GROUPS: groups.list_groups,
    ApiKey.DESCRIBE_GROUPS: groups.describe_groups,
    ApiKey.DELETE_GROUPS: groups.delete_groups,
    ApiKey.SASL_HANDSHAKE: sasl.sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: sasl.sasl_authenticate,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_groups.consumer_group_heartbeat,
}

#: APIs whose clients read errors per partition: a handler failure is answered partition by partition
#: (any other API answers with its top-level error code).
FAILURE_RESPONSES: Final[dict[int, FailureResponse]] = {
    ApiKey.PRODUCE: data.produce_failure,
    ApiKey.FETCH: data.fetch_failure,
}
