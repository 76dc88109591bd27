"""Settings of the daemon's network surfaces (kept apart from :class:`BrokerConfig`).

``ServerSettings`` holds what only the daemon needs: listen addresses and
request size limits. :func:`load_config` reads one YAML file into a
``ServerSettings`` and a ``BrokerConfig``: server keys may sit at the top level
or under a ``server:`` section, every other top-level key is a broker key
(unknown keys are rejected by ``BrokerConfig``, naming the key).

This is the one place that parses the file; it will give way to the shared
loader of ``lkstream.config`` (YAML + ``LKSTREAM_*`` env + flags) when that lands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lkstream.config import BrokerConfig
from lkstream.errors import InvalidArgumentError

#: Room for the protobuf framing around a maximal record batch.
REQUEST_HEADROOM_BYTES = 1024 * 1024


class ServerSettings(BaseModel):
    """Listen addresses and limits of the gRPC and HTTP servers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    grpc_host: str = Field("127.0.0.1", description="gRPC listen address (loopback unless configured).")
    grpc_port: int = Field(9090, ge=0, le=65535, description="gRPC port; 0 picks a free port.")
    http_host: str = Field("127.0.0.1", description="HTTP (metrics, health) listen address.")
    http_port: int = Field(8080, ge=0, le=65535, description="HTTP port.")
    max_request_bytes: int | None = Field(
        None,
        ge=1024,
        description="Largest gRPC message accepted or sent; default: the broker's max_batch_bytes plus 1 MiB.",
    )
    shutdown_grace_s: float = Field(5.0, ge=0, le=600, description="Time in-flight RPCs get on shutdown.")

    def message_limit(self, broker: BrokerConfig) -> int:
        """The gRPC message size limit, derived from the broker's batch limit unless set."""
        if self.max_request_bytes is not None:
            return self.max_request_bytes
        return broker.max_batch_bytes + REQUEST_HEADROOM_BYTES


_SERVER_KEYS = frozenset(ServerSettings.model_fields)


def split_settings(values: dict[str, Any]) -> tuple[ServerSettings, BrokerConfig]:
    """Build both models from one mapping; raise :class:`InvalidArgumentError` naming a bad key."""
    values = dict(values)
    server_values = values.pop("server", None) or {}
    if not isinstance(server_values, dict):
        raise InvalidArgumentError("invalid configuration: server: must be a mapping")
    # Top-level server keys (also where command-line overrides land) win over the section.
    server_values = {**server_values, **{k: values.pop(k) for k in list(values) if k in _SERVER_KEYS}}
    try:
        server = ServerSettings(**server_values)
    except ValidationError as exc:
        problems = "; ".join(f"server.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise InvalidArgumentError(f"invalid configuration: {problems}") from None
    return server, BrokerConfig.build(values)


def load_config(path: str | Path | None, **overrides: Any) -> tuple[ServerSettings, BrokerConfig]:
    """Read ``path`` (YAML; None for defaults) and apply ``overrides`` (non-None values win)."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read config file {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise InvalidArgumentError(f"config file {path} is not valid YAML: {exc}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise InvalidArgumentError(f"config file {path} must hold a mapping of settings")
        values.update(loaded)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return split_settings(values)
