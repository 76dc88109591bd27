"""Produce through the daemon (a mixin of :class:`~lkstream.client.remote.broker.RemoteBroker`).

The client encodes record batches itself and sends each as a ``record_batch``
on the daemon's ``ProduceStream`` (one stream per event loop, kept open): the
daemon appends it with no per-record work and answers in request order. A call
whose records go to several partitions sends one batch per partition, all before
the first answer is awaited; batches of one partition are sent one after the
other, so a failure never lets a later batch of a partition overtake an earlier
one. The blocking methods run the same code on the client's own event-loop
thread (:class:`~lkstream.client.remote.streams.LoopThread`).

Encoding takes the embedded broker's fast path (:func:`lkstream.broker.encoder.encode_call`:
one C-level encode per target partition, keys routed once per distinct key) when
the call allows it: ``(key, value)`` pairs, batches within ``batch_bytes`` and the
daemon's ``max_message_bytes``, no compression, and for keyed calls a partition
count already known. Anything else takes the general path, which normalises and
checks every record first and reports errors precisely.

Delivery is **at-least-once** (:mod:`lkstream.client.retry`, ``Retry.RESEND``): a
request whose answer was lost with the connection is sent again. A call that
fails may have appended the batches of its other partitions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from lkstream.broker.encoder import encode_call
from lkstream.broker.partitioner import StickyPartitioner, partition_for_key
from lkstream.client.remote.kafka_lane import AsyncLane, BlockingLane, LaneState, LaneTimeout, LaneUnavailable
from lkstream.client.remote.sync import SentRequest, SyncStreamedCalls
from lkstream.client.remote.wire import produce_request
from lkstream.client.retry import Retry
from lkstream.errors import BrokerUnavailableError, LkstreamError, RecordTooLargeError
from lkstream.format.batch import LAST_OFFSET_DELTA_AT
from lkstream.format.codec import Compression, Headers, KeyValue, encode_batch
from lkstream.format.encode import offsets
from lkstream.format.produce import chunk_by_size, normalise_records, record_sizes
from lkstream.wire._proto import messaging_pb2 as pb
from lkstream.wire.kafka_lane import PartitionAnswer

_first = itemgetter(0)
Results = list[tuple[int, int]]
Batches = Sequence[tuple[int | None, bytes | bytearray]]
LaneBatches = list[tuple[int, bytearray]]
#: A batch's answer, from gRPC or from the Kafka lane: what results are built from.
Answer = pb.ProduceResponse | PartitionAnswer
#: The Kafka listener's answer for a partition that does not exist (Kafka's UNKNOWN_TOPIC_OR_PARTITION).
_UNKNOWN_PARTITION = 3


@dataclass(frozen=True, slots=True)
class _Plan:
    """A call's batches, ``(partition or None for "the daemon picks", batch)``, and how answers become results."""

    batches: list[tuple[int | None, bytearray]]
    results: Callable[[Sequence[Answer]], Results]


class RemoteProduce(SyncStreamedCalls):
    """produce_many[_sync] and produce_batch[_sync]; the attributes below are set by RemoteBroker."""

    address: str
    batch_bytes: int
    compression: Compression
    max_message_bytes: int | None
    _partitions: dict[str, int]
    _sticky: StickyPartitioner
    _lane_state: LaneState
    _lane: BlockingLane

    def _confirm_lane(self) -> None:
        raise NotImplementedError  # RemoteBroker's

    async def _aconfirm_lane(self) -> None:
        raise NotImplementedError  # RemoteBroker's

    def _async_lane(self) -> AsyncLane:
        raise NotImplementedError  # RemoteBroker's

    async def _adescribe_count(self, topic: str) -> int:
        raise NotImplementedError  # RemoteBroker's

    def _describe_count(self, topic: str) -> int:
        raise NotImplementedError  # RemoteBroker's

    async def produce_many(
        self,
        topic: str,
        records: Sequence[Any],
        *,
        partition: int | None = None,
        compression: Compression | str | None = None,
    ) -> Results:
        """Append ``(key, value[, headers])`` records; return ``[(partition, offset)]`` in input order."""
        plan = self._plan(topic, records, partition, compression)
        if plan is None:
            plan = self._counted_plan(topic, records, partition, compression, await self._adescribe_count(topic))
        if self._lane_state.address:
            if self._lane_state.stale:
                await self._aconfirm_lane()
            count = self._partitions.get(topic)
            if count is None and self._lane_state.usable():
                count = await self._adescribe_count(topic)
            batches = self._lane_batches(topic, plan, count)
            if batches is not None:
                try:
                    answers = await self._async_lane().produce(topic, batches)
                except LaneTimeout as exc:
                    raise BrokerUnavailableError(self.address, str(exc)) from None  # as gRPC's deadline
                except LaneUnavailable as exc:
                    if exc.answers:  # the rest goes through gRPC; nothing answered is sent twice
                        return plan.results(await self._settle(topic, plan, batches, exc.answers, complete=False))
                else:
                    return plan.results(await self._settle(topic, plan, batches, answers))
        return plan.results(await self._send_batches(topic, plan.batches))

    def produce_many_sync(
        self,
        topic: str,
        records: Sequence[Any],
        *,
        partition: int | None = None,
        compression: Compression | str | None = None,
    ) -> Results:
        """Blocking twin of :meth:`produce_many` (sent from the caller's thread on the synchronous channel)."""
        plan = self._plan(topic, records, partition, compression)
        if plan is None:
            plan = self._counted_plan(topic, records, partition, compression, self._describe_count(topic))
        return plan.results(self._sent_sync(topic, plan))

    async def produce_batch(self, topic: str, partition: int, batch: bytes | bytearray) -> tuple[int, int]:
        """Append one pre-encoded v2 batch; return ``(base_offset, last_offset)``."""
        (response,) = await self._send_batches(topic, [(partition, batch)])
        return int(response.base_offset), int(response.last_offset)

    def produce_batch_sync(self, topic: str, partition: int, batch: bytes | bytearray) -> tuple[int, int]:
        """Blocking twin of :meth:`produce_batch` (sent from the caller's thread, through the Kafka
        lane when the daemon offers one)."""
        if not self._lane_state.address:
            return self.produce_batch_start(topic, partition, batch).result()
        whole = batch if isinstance(batch, bytearray) else bytearray(batch)
        plan = _Plan([(partition, whole)], lambda answers: [_batch_span(answers[0], whole)])
        return plan.results(self._sent_sync(topic, plan))[0]

    def produce_batch_start(self, topic: str, partition: int, batch: bytes | bytearray) -> PendingBatch:
        """Send one pre-encoded v2 batch now, from this thread; ``result()`` of the handle waits for its answer.

        For a caller that keeps several batches in flight without an event loop (the
        Spark sink): batches started from one thread are written in that order on one
        stream, so one partition's batches are appended in order. ``result()`` returns
        ``(base_offset, last_offset)`` or raises the call's error after the same
        retries as :meth:`produce_batch_sync`; call it once per handle, in any thread.
        A started batch is held in memory until it is answered: keep the number in
        flight bounded (the sink keeps 4).
        """
        return PendingBatch(self._send_sync("ProduceStream", produce_request(topic, partition, batch), Retry.RESEND))

    async def _send_batches(self, topic: str, batches: Batches) -> list[pb.ProduceResponse]:
        requests = [produce_request(topic, pid, batch) for pid, batch in batches]
        if _independent(batches):
            return await self._astreamed("ProduceStream", requests, Retry.RESEND)
        # Several batches for one partition: each waits for the previous answer (order within a partition).
        return [(await self._astreamed("ProduceStream", [r], Retry.RESEND))[0] for r in requests]

    def _send_batches_sync(self, topic: str, batches: Batches) -> list[pb.ProduceResponse]:
        requests = [produce_request(topic, pid, batch) for pid, batch in batches]
        if _independent(batches):
            return self._streamed_sync("ProduceStream", requests, Retry.RESEND)
        return [self._streamed_sync("ProduceStream", [r], Retry.RESEND)[0] for r in requests]

    # -- the Kafka lane (lkstream.client.remote.kafka_lane) -------------------------------------------

    def _sent_sync(self, topic: str, plan: _Plan) -> list[Answer]:
        """The plan's batches sent from this thread, through the lane when it can carry them; an answer each."""
        if self._lane_state.address:
            if self._lane_state.stale:
                self._confirm_lane()
            count = self._partitions.get(topic)
            if count is None and self._lane_state.usable():
                count = self._describe_count(topic)
            batches = self._lane_batches(topic, plan, count)
            if batches is not None:
                try:
                    answers = self._lane.produce(topic, batches)
                except LaneTimeout as exc:
                    raise BrokerUnavailableError(self.address, str(exc)) from None  # as gRPC's deadline
                except LaneUnavailable as exc:
                    if exc.answers:  # the rest goes through gRPC; nothing answered is sent twice
                        return self._settle_sync(topic, plan, batches, exc.answers, complete=False)
                else:
                    return self._settle_sync(topic, plan, batches, answers)
        return list(self._send_batches_sync(topic, plan.batches))

    def _lane_batches(self, topic: str, plan: _Plan, count: int | None) -> LaneBatches | None:
        """The plan's batches with every partition chosen, or None when the call goes through gRPC.

        The lane carries one batch per partition (one Kafka request, one answer each) to
        partitions the client knows exist; a batch the daemon would place goes to the client's
        sticky partition, as the keyless records of a keyed call already do.
        """
        if count is None or not plan.batches or not self._lane_state.usable():
            return None
        if len(topic.encode("utf-8", "surrogatepass")) >= 2**15:
            return None  # longer than Kafka's int16-length string: gRPC says what is wrong with the name
        batches = [(self._sticky.next(count) if pid is None else pid, batch) for pid, batch in plan.batches]
        targets = {pid for pid, _ in batches}
        if len(targets) != len(batches) or not all(0 <= pid < count for pid in targets):
            return None
        return batches

    def _unsettled(
        self, topic: str, plan: _Plan, batches: LaneBatches, answers: dict[int, PartitionAnswer], complete: bool
    ) -> tuple[list[Answer | None], list[tuple[int, tuple[int | None, bytearray]]]]:
        """The lane's answers by batch, and what gRPC must send again: ``(index, batch)`` of each batch the
        listener refused or, when not ``complete`` (the connection was lost part-way), did not answer.

        A refused batch was not appended (the one exception, an fsync failing in ``sync`` mode,
        makes the resend at-least-once, as a gRPC resend is), and gRPC's answer is the client's
        contract: the error's class and fields (``limit``, ``size``...), or its retries of an
        overloaded or stopping daemon. A partition the client thought existed and does not (a
        topic deleted or re-created smaller) drops the cached partition count as well.
        """
        missing = [pid for pid, _ in batches if pid not in answers]
        if missing and complete:  # a daemon bug: what was appended is unknown, so nothing is sent again
            raise LkstreamError(f"the daemon's Kafka listener answered no result for {topic} partitions {missing}")
        resends: list[tuple[int, tuple[int | None, bytearray]]] = []
        for index, (pid, batch) in enumerate(batches):
            answer = answers.get(pid)
            if answer is None:
                # Its answer was lost with the connection, and it may be appended already: at-least-once,
                # as gRPC's resend, to the partition the first copy went to.
                resends.append((index, (pid, batch)))
            elif answer.error_code:
                if answer.error_code == _UNKNOWN_PARTITION:
                    self._partitions.pop(topic, None)
                # As planned: the daemon places a keyless batch, so a partition gone is not named again.
                resends.append((index, plan.batches[index]))
        return [answers.get(pid) for pid, _ in batches], resends

    async def _settle(
        self,
        topic: str,
        plan: _Plan,
        batches: LaneBatches,
        answers: dict[int, PartitionAnswer],
        *,
        complete: bool = True,
    ) -> list[Answer]:
        """Each batch's answer: the lane's, or gRPC's for what :meth:`_unsettled` sends again."""
        settled, resends = self._unsettled(topic, plan, batches, answers, complete)
        for index, batch in resends:
            (settled[index],) = await self._send_batches(topic, [batch])
        return _all_answered(settled)

    def _settle_sync(
        self,
        topic: str,
        plan: _Plan,
        batches: LaneBatches,
        answers: dict[int, PartitionAnswer],
        *,
        complete: bool = True,
    ) -> list[Answer]:
        settled, resends = self._unsettled(topic, plan, batches, answers, complete)
        for index, batch in resends:
            (settled[index],) = self._send_batches_sync(topic, [batch])
        return _all_answered(settled)

    def _counted_plan(
        self,
        topic: str,
        records: Sequence[Any],
        partition: int | None,
        compression: Compression | str | None,
        count: int,
    ) -> _Plan:
        plan = self._plan(topic, records, partition, compression, count)
        assert plan is not None, "a call with the partition count known is always planned"
        return plan

    def _plan(
        self,
        topic: str,
        records: Sequence[Any],
        partition: int | None,
        compression: Compression | str | None,
        count: int | None = None,
    ) -> _Plan | None:
        """The call's batches; None when the topic's partition count must be asked first (pass it as ``count``)."""
        codec = self.compression if compression is None else Compression.parse(compression)
        plan = self._fast_plan(topic, records, partition, codec) if count is None else None
        if plan is not None:
            return plan
        pairs, headers = normalise_records(records)
        if not pairs:
            return _Plan([], lambda answers: [])
        self._check_sizes(pairs)  # before a describe that may auto-create the topic
        if count is None and partition is None and any(key is not None for key, _ in pairs):
            count = self._partitions.get(topic)
            if count is None:
                return None
        return self._general_plan(pairs, headers, partition, count, codec)

    # -- planning --------------------------------------------------------------------------------

    def _fast_plan(self, topic: str, records: Sequence[Any], partition: int | None, codec: Compression) -> _Plan | None:
        """The embedded broker's one-pass encoder, when the call qualifies (see the module docstring)."""
        if codec is not Compression.NONE or type(records) not in (list, tuple) or not records:
            return None
        try:
            keyless = partition is None and set(map(_first, records)) == {None}
        except (TypeError, IndexError, KeyError):
            return None  # unhashable keys, not pairs: the general path says what is wrong
        count = 1 if partition is not None or keyless else self._partitions.get(topic)
        if count is None:
            return None  # the first keyed call of a topic asks for its partition count after checking records
        encoded = encode_call(
            records,
            partitions=count,
            explicit=partition,
            sticky=self._sticky,
            codec=codec,
            timestamp_ms=time.time_ns() // 1_000_000,
        )
        limit = min(self.batch_bytes, self.max_message_bytes or self.batch_bytes)
        if encoded is None or any(len(batch) > limit for _, batch in encoded.batches):
            return None  # large records or calls: the general path checks and splits them
        if count == 1 and partition is None:
            # One batch the daemon places (its sticky partition, as the embedded broker does).
            size = len(records)
            return _Plan([(None, encoded.batches[0][1])], lambda answers: _consecutive(answers[0], size))
        return _Plan(
            [(pid, batch) for pid, batch in encoded.batches],
            lambda answers: encoded.results([int(a.base_offset) for a in answers]),
        )

    def _general_plan(
        self,
        pairs: list[KeyValue],
        headers: list[Headers] | None,
        explicit: int | None,
        count: int | None,
        codec: Compression,
    ) -> _Plan:
        """Route records to partitions (as the embedded broker does) and encode one batch per chunk."""
        sizes = record_sizes(pairs)
        routes: dict[int | None, list[int]]
        if explicit is not None or count is None or count == 1:
            routes = {explicit if count != 1 or explicit is not None else 0: list(range(len(pairs)))}
        else:
            keyless = self._sticky.next(count)
            routes = {}
            for i, (key, _) in enumerate(pairs):
                target = keyless if key is None else partition_for_key(key, count)
                routes.setdefault(target, []).append(i)
        batches: list[tuple[int | None, bytearray]] = []
        placed: list[list[int]] = []
        for pid, indices in routes.items():
            for chunk in chunk_by_size(indices, sizes, self.batch_bytes):
                batch = encode_batch(
                    [pairs[i] for i in chunk],
                    headers=None if headers is None else [headers[i] for i in chunk],
                    compression=codec,
                )
                batches.append((pid, batch))
                placed.append(chunk)

        def results(answers: Sequence[Answer]) -> Results:
            out: Results = [(0, 0)] * len(pairs)
            for indices, answer in zip(placed, answers, strict=True):
                pid, base = int(answer.partition), int(answer.base_offset)
                for delta, i in enumerate(indices):
                    out[i] = (pid, base + delta)
            return out

        return _Plan(batches, results)

    def _check_sizes(self, pairs: list[KeyValue]) -> None:
        """The daemon appends our batches without looking at records: enforce its per-record limit here."""
        if self.max_message_bytes is not None:
            largest = max(record_sizes(pairs))
            if largest > self.max_message_bytes:
                raise RecordTooLargeError(largest, self.max_message_bytes)


class PendingBatch:
    """A batch :meth:`RemoteProduce.produce_batch_start` sent; :meth:`result` waits for its offsets."""

    __slots__ = ("_sent",)

    def __init__(self, sent: SentRequest) -> None:
        self._sent = sent

    def result(self) -> tuple[int, int]:
        """``(base_offset, last_offset)`` of the appended batch (or its error, after retries)."""
        response = self._sent.result()
        return int(response.base_offset), int(response.last_offset)


def _batch_span(answer: Answer, batch: bytearray) -> tuple[int, int]:
    """``(base_offset, last_offset)`` of an appended batch (the lane answers its base offset only)."""
    base = int(answer.base_offset)
    if isinstance(answer, pb.ProduceResponse):
        return base, int(answer.last_offset)
    return base, base + int.from_bytes(batch[LAST_OFFSET_DELTA_AT : LAST_OFFSET_DELTA_AT + 4], "big", signed=True)


def _all_answered(settled: list[Answer | None]) -> list[Answer]:
    assert all(answer is not None for answer in settled), "every batch is answered by the lane or by gRPC"
    return settled  # type: ignore[return-value]


def _independent(batches: Batches) -> bool:
    """Whether ``batches`` may all be in flight at once: no two for one partition (or for the daemon's pick)."""
    targets = [pid for pid, _ in batches]
    return len(targets) <= 1 or (None not in targets and len(set(targets)) == len(targets))


def _consecutive(answer: Answer, count: int) -> Results:
    # The C encoder's pairs, as the embedded broker's: untracked by the GC, so the young collections
    # their allocation still sets off (every ~700 objects) do not walk a call's 1,000 results.
    return offsets(int(answer.partition), int(answer.base_offset), count)
