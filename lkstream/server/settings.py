"""Settings of the daemon's network surfaces (kept apart from :class:`BrokerConfig`).

``ServerSettings`` holds what only the daemon needs: listen addresses and
request size limits. It validates the ``server:`` section that
:func:`lkstream.config.load_config` merges from the YAML file,
``LKSTREAM_SERVER__*`` environment variables and ``server.<key>`` overrides
(command-line flags); :func:`load_settings` is the daemon's one way to read its
configuration. Errors name the key and the source its value came from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lkstream.config import SERVER_SECTION, BrokerConfig, LoadedConfig, load_config
from lkstream.errors import InvalidArgumentError

#: Room for the protobuf framing around a maximal record batch.
REQUEST_HEADROOM_BYTES = 1024 * 1024


class ServerSettings(BaseModel):
    """Listen addresses and limits of the gRPC and HTTP servers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    grpc_host: str = Field("127.0.0.1", description="gRPC listen address (loopback unless configured).")
    grpc_port: int = Field(9090, ge=0, le=65535, description="gRPC port; 0 picks a free port.")
    http_host: str = Field("127.0.0.1", description="HTTP (metrics, health) listen address.")
    http_port: int = Field(8080, ge=0, le=65535, description="HTTP port; 0 picks a free port.")
    max_request_bytes: int | None = Field(
        None,
        ge=1024,
        description="Largest gRPC message accepted or sent; default: the broker's max_batch_bytes plus 1 MiB.",
    )
    shutdown_grace_s: float = Field(5.0, ge=0, le=600, description="Time in-flight RPCs get on shutdown.")
    http_default_topic: str = Field(
        "events",
        pattern=r"^[A-Za-z0-9._-]{1,249}$",
        description="The topic of the HTTP event-log routes POST /produce/{partition} and GET /fetch/{partition}.",
    )
    http_default_topic_partitions: int = Field(
        100, ge=1, le=10_000, description="Partitions of http_default_topic when first used creates it."
    )

    def message_limit(self, broker: BrokerConfig) -> int:
        """The gRPC message size limit, derived from the broker's batch limit unless set."""
        if self.max_request_bytes is not None:
            return self.max_request_bytes
        return broker.max_batch_bytes + REQUEST_HEADROOM_BYTES


def server_settings(loaded: LoadedConfig) -> ServerSettings:
    """Validate ``loaded.server``; raise :class:`InvalidArgumentError` naming each bad key and its source."""
    try:
        return ServerSettings.model_validate(loaded.server)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = f"{SERVER_SECTION}.{'.'.join(str(p) for p in err['loc'])}"
            where = loaded.sources.get(key, "default")
            if err["type"] == "extra_forbidden":
                known = ", ".join(ServerSettings.model_fields)
                problems.append(f"unknown key {key!r} (from {where}); known {SERVER_SECTION} keys are {known}")
            else:
                problems.append(f"{key}: {err['msg']} (got {err['input']!r}, from {where})")
        raise InvalidArgumentError(f"invalid configuration: {'; '.join(problems)}") from None


def load_settings(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[ServerSettings, BrokerConfig]:
    """The daemon's configuration: :func:`lkstream.config.load_config`, then :class:`ServerSettings`.

    ``overrides`` maps broker keys or ``server.<key>`` to values (None: not given).
    """
    loaded = load_config(path, env=env, overrides=overrides)
    return server_settings(loaded), loaded.broker
