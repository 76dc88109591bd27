"""Typed, validated broker configuration.

Names follow the blueprint (``persist_dir``, ``fsync_mode``, ``fsync_interval_ms``,
``fsync_group_bytes``, ``segment_max_bytes``, ``partitions``); every limit carries
its unit in its name. Unknown keys and out-of-range values are rejected with a
message naming the key.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lkstream.errors import InvalidArgumentError

MiB = 1024 * 1024


class BrokerConfig(BaseModel):
    """Everything a broker needs; every field has a documented default."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    persist_dir: str = Field("./data", description="Data directory (created if missing).")
    fsync_mode: Literal["sync", "group", "none"] = Field(
        "group", description="sync: ack after fsync; group: fsync every interval/bytes; none: OS decides."
    )
    fsync_interval_ms: int = Field(
        100, ge=1, le=60_000, description="Group commit: fsync at most this long after a write."
    )
    fsync_group_bytes: int = Field(128 * 1024, ge=1, description="Group commit: fsync once this many bytes wait.")
    segment_max_bytes: int = Field(
        64 * MiB,
        ge=4096,
        le=2**31 - 1,
        description="Roll to a new segment past this size (a larger batch gets a segment of its own).",
    )
    index_interval_bytes: int = Field(4096, ge=0, description="Bytes of segment data between sparse index entries.")
    partitions: int = Field(1, ge=1, le=10_000, description="Partitions of auto-created topics.")
    auto_create_topics: bool = Field(True, description="Create unknown topics on first produce.")
    retention_ms: int = Field(-1, ge=-1, description="Delete sealed segments older than this; -1 keeps forever.")
    retention_bytes: int = Field(
        -1,
        ge=-1,
        description="Delete oldest sealed segments while the rest still hold this many bytes (as Kafka); -1 never.",
    )
    retention_check_interval_ms: int = Field(60_000, ge=10, description="How often retention runs.")
    max_message_bytes: int = Field(1 * MiB, ge=1, le=256 * MiB, description="Largest key + value of one record.")
    max_batch_bytes: int = Field(16 * MiB, ge=1024, le=2**31 - 1, description="Largest record batch accepted.")
    max_inflight_bytes: int = Field(256 * MiB, ge=1, description="Accepted, unacknowledged bytes before Backpressure.")
    hot_tail_bytes: int = Field(8 * MiB, ge=0, description="Newest batches kept in memory per partition.")
    checkpoint_interval_ms: int = Field(1000, ge=1, description="How often checkpoint.meta follows group commit.")

    @model_validator(mode="after")
    def _batch_holds_a_message(self) -> BrokerConfig:
        if self.max_batch_bytes < self.max_message_bytes:
            raise ValueError("max_batch_bytes must be at least max_message_bytes")
        return self

    @classmethod
    def build(cls, values: dict[str, Any]) -> BrokerConfig:
        """Validate ``values``; raise :class:`InvalidArgumentError` naming each bad key."""
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}" for err in exc.errors()
            )
            raise InvalidArgumentError(f"invalid configuration: {problems}") from None
