"""DeleteRecords (API 21): move partitions' log start offsets forward (issue 24).

Kafka Streams purges its repartition topics with it, and ``kafka-delete-records.sh`` and
every admin client (``AdminClient.delete_records``) send it. Each partition's offset
becomes its log start offset through :meth:`~lkstream.broker.Broker.delete_records`
(durable when answered; -1 means the high watermark), and the answer carries the new
low watermark. As Kafka: DELETE on the topic (TOPIC_AUTHORIZATION_FAILED), an unknown
topic or partition is UNKNOWN_TOPIC_OR_PARTITION, an offset above the high watermark
OFFSET_OUT_OF_RANGE, each per partition; the work (a few fsyncs per partition) runs in
a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from lkstream.errors import InvalidArgumentError, LkstreamError, UnknownTopicError
from lkstream.kafka import kio_codec
from lkstream.kafka.context import RequestContext
from lkstream.kafka.errors import error_code
from lkstream.kafka.protocol import ApiKey, RequestHeader


async def delete_records(ctx: RequestContext, header: RequestHeader, frame: bytes) -> bytes:
    version = header.api_version
    request = kio_codec.decode_request(ApiKey.DELETE_RECORDS, version, frame, header.body_offset)
    response_cls = kio_codec.response_type(ApiKey.DELETE_RECORDS, version)
    topic_cls = kio_codec.item_type(response_cls, "topics")
    partition_cls = kio_codec.item_type(topic_cls, "partitions")
    topics = []
    for topic in request.topics:
        wanted = [(p.partition_index, int(p.offset)) for p in topic.partitions]
        if ctx.allowed("delete", "topic", topic.name):
            answers = await asyncio.to_thread(_delete, ctx, topic.name, wanted)
        else:
            answers = [(pid, -1, ErrorCode.topic_authorization_failed) for pid, _ in wanted]
        partitions = tuple(
            kio_codec.make(partition_cls, partition_index=pid, low_watermark=low, error_code=code)
            for pid, low, code in answers
        )
        topics.append(kio_codec.make(topic_cls, name=topic.name, partitions=partitions))
    return kio_codec.encode(kio_codec.make(response_cls, throttle_time=datetime.timedelta(0), topics=tuple(topics)))


def _delete(ctx: RequestContext, topic: str, wanted: list[tuple[int, int]]) -> list[tuple[int, int, Any]]:
    """``(partition, low watermark, error code)`` per partition, each applied on its own as Kafka does."""
    answers: list[tuple[int, int, Any]] = []
    for pid, offset in wanted:
        try:
            low = ctx.broker.delete_records(topic, {pid: offset})[pid]
        except (UnknownTopicError, KeyError):
            answers.append((pid, -1, ErrorCode.unknown_topic_or_partition))
        except InvalidArgumentError as exc:
            # A partition index the topic does not have is Kafka's UNKNOWN_TOPIC_OR_PARTITION.
            code = ErrorCode.unknown_topic_or_partition if "does not exist" in str(exc) else error_code(exc)
            answers.append((pid, -1, code))
        except LkstreamError as exc:
            answers.append((pid, -1, error_code(exc)))
        else:
            answers.append((pid, low, 0))
    return answers
