"""Admin work of the daemon's surfaces, off the event loop (issue 12, finding 9).

Creating a topic is file-system work per partition (directories, files, fsyncs): seconds
for thousands of partitions. gRPC and HTTP handlers run it in a worker thread with these
helpers, so the event loop keeps serving every other client meanwhile; the broker's
topic table is copy-on-write, so the reads those clients make never wait for the lock
an admin call holds.
"""

from __future__ import annotations

import asyncio
import contextlib

from lkstream.broker.broker import Broker
from lkstream.errors import TopicExistsError, UnknownTopicError


async def ensure_topic(
    broker: Broker, name: str, *, requester: str, partitions: int | None = None, create: bool = True
) -> int:
    """Partition count of ``name``; if it is missing and ``create``, create it first, in a worker thread.

    Without ``partitions`` that is an auto-creation (when the broker auto-creates topics), counted
    against ``requester``'s budget (:meth:`Broker.auto_create_topic`, issue 28, finding 6); with
    ``partitions`` (a topic the daemon's own settings name) a plain create.
    :class:`~lkstream.errors.UnknownTopicError` when it is missing and may not be created.
    """
    try:
        return broker.partitions_for(name)
    except UnknownTopicError:
        if not (create and (partitions is not None or broker.config.auto_create_topics)):
            raise
    if partitions is None:
        return await asyncio.to_thread(lambda: broker.auto_create_topic(name, requester=requester))
    return await asyncio.to_thread(_create_if_missing, broker, name, partitions)


def _create_if_missing(broker: Broker, name: str, partitions: int) -> int:
    with contextlib.suppress(TopicExistsError):  # a concurrent request created it
        broker.create_topic(name, partitions)
    return broker.partitions_for(name)
