"""What a topic's configs do to a producer's batch before it is appended (Kafka's LogValidator, per topic).

:func:`apply_topic_policy` runs on every pre-encoded batch (the Kafka listener, gRPC's
``record_batch``, the Kafka lane) after :func:`~lkstream.format.validate.validate_producer_batch`
checked it, in this order, as Kafka's broker does:

1. ``max.message.bytes``: a batch larger than it is refused (:class:`RecordTooLargeError`,
   MESSAGE_TOO_LARGE);
2. with ``message.timestamp.type=CreateTime``, a record timestamp further than
   ``message.timestamp.after.max.ms`` ahead of the broker's clock (read from the header's max
   timestamp) or ``message.timestamp.before.max.ms`` behind it (the records are decoded for
   their oldest timestamp, only when that bound is set) is refused
   (:class:`InvalidTimestampError`, INVALID_TIMESTAMP);
3. ``compression.type``: ``producer`` keeps the batch; a codec (or ``uncompressed``) that is
   not the batch's recompresses its records section, keeping every header field
   (:func:`~lkstream.format.encode.recompress`), and the recompressed batch must fit
   ``max.message.bytes`` too;
4. ``message.timestamp.type=LogAppendTime`` stamps the batch with the broker's clock
   (:func:`~lkstream.format.batch.stamp_log_append_time`).

With the defaults (``producer``, CreateTime, no timestamp bounds) this is one size comparison:
the append path stays O(1) per batch apart from the CRC the validation already computed.
Recompression and the oldest-timestamp scan touch records, and run only for topics configured
to need them, as in Kafka.
"""

from __future__ import annotations

from typing import Final

from lkstream.errors import InvalidTimestampError, RecordTooLargeError
from lkstream.format.batch import BatchHeader, stamp_log_append_time
from lkstream.format.codec import Compression, decode_batch
from lkstream.format.encode import recompress
from lkstream.format.validate import Limits, records_of
from lkstream.storage.topic_config import EffectiveTopicConfig
from lkstream.storage.topic_config_keys import LONG_MAX

#: ``compression.type`` values -> batch codec numbers (``producer`` keeps whatever the batch has).
CODECS: Final[dict[str, int]] = {
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}


def topic_codec(config: EffectiveTopicConfig) -> Compression | None:
    """The codec every batch of the topic gets, or None when the producer's codec is kept."""
    codec = CODECS.get(config.compression_type)
    return None if codec is None else Compression(codec)


def check_size(topic: str, size: int, config: EffectiveTopicConfig) -> None:
    """Refuse a batch of ``size`` bytes above the topic's ``max.message.bytes``."""
    if size > config.max_message_bytes:
        raise RecordTooLargeError(
            size, config.max_message_bytes, what="record batch", setting=f"max.message.bytes of topic {topic!r}"
        )


def apply_topic_policy(
    topic: str,
    batch: bytearray,
    header: BatchHeader,
    config: EffectiveTopicConfig,
    *,
    now_ms: int,
    limits: Limits,
) -> tuple[bytearray, int]:
    """The batch to append (``batch`` itself, changed in place, or a recompressed copy) and its log
    append time (-1 for CreateTime topics); see the module docstring for the steps and errors."""
    check_size(topic, len(batch), config)
    if not config.log_append_time:
        _check_timestamps(topic, batch, header, config, now_ms=now_ms, limits=limits)
    codec = topic_codec(config)
    if codec is not None and codec != header.compression:
        records = records_of(batch, header, limits.max_decompressed_bytes)
        batch = recompress(batch, records, codec, config.compression_level)
        check_size(topic, len(batch), config)
    if config.log_append_time:
        stamp_log_append_time(batch, now_ms)
        return batch, now_ms
    return batch, -1


def _check_timestamps(
    topic: str, batch: bytearray, header: BatchHeader, config: EffectiveTopicConfig, *, now_ms: int, limits: Limits
) -> None:
    after, before = config.message_timestamp_after_max_ms, config.message_timestamp_before_max_ms
    if after < LONG_MAX and header.max_timestamp - now_ms > after:
        raise InvalidTimestampError(topic, header.max_timestamp, now_ms, "message.timestamp.after.max.ms", after)
    if before < LONG_MAX:
        # The header has the newest timestamp only; the oldest needs the records (Kafka checks each one).
        oldest = min(r.timestamp for r in decode_batch(bytes(batch), topic, 0, 0, limits.max_decompressed_bytes))
        if now_ms - oldest > before:
            raise InvalidTimestampError(topic, oldest, now_ms, "message.timestamp.before.max.ms", before)
