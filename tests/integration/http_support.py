"""Helpers for the HTTP JSON API tests: a plain urllib client and a daemon for wider fixture scopes.

The client speaks HTTP/1.1 with the standard library only, so the tests exercise
the API as any tool without an aiohttp/gRPC stack would (curl, a shell script).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.integration.conftest import REPO, SERVER_KEYS, DaemonProcess

TIMEOUT_S = 30.0


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any  # parsed JSON, or None for an empty body

    @property
    def error_code(self) -> str:
        assert isinstance(self.body, dict) and "error" in self.body, self.body
        return str(self.body["error"]["code"])


class Api:
    """``Api("127.0.0.1:8080").post("/produce", {...})`` -> :class:`Reply`; never raises on 4xx/5xx."""

    def __init__(self, address: str) -> None:
        self.base = f"http://{address}"

    def call(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None, timeout: float = TIMEOUT_S
    ) -> Reply:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return self._reply(response.status, dict(response.headers), response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return self._reply(exc.code, dict(exc.headers), exc.read())

    @staticmethod
    def _reply(status: int, headers: dict[str, str], payload: bytes) -> Reply:
        content_type = headers.get("Content-Type", "")
        if payload:
            assert content_type.startswith("application/json"), (status, content_type, payload[:200])
        return Reply(status, headers, json.loads(payload) if payload else None)

    def get(self, path: str) -> Reply:
        return self.call("GET", path)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Reply:
        return self.call("POST", path, body, **kwargs)

    def delete(self, path: str) -> Reply:
        return self.call("DELETE", path)

    def produce(self, topic: str, records: list[Any], partition: int | None = None) -> Reply:
        entry: dict[str, Any] = {"topic": topic, "records": records}
        if partition is not None:
            entry["partition"] = partition
        return self.post("/produce", {"topic_partitions": [entry]})

    def consume(self, *partitions: dict[str, Any], **options: Any) -> Reply:
        return self.post("/consume", {"partitions": list(partitions), **options}, timeout=TIMEOUT_S + 60)


def start_module_daemon(root: Path, **config: Any) -> DaemonProcess:
    """A daemon on free ports over ``root/data`` (as the ``start_daemon`` fixture, for wider scopes)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    server = {"grpc_port": 0, "http_port": 0, "kafka_port": 0, **{k: v for k, v in config.items() if k in SERVER_KEYS}}
    values = {"persist_dir": str(root / "data"), **{k: v for k, v in config.items() if k not in SERVER_KEYS}}
    values["server"] = server
    path = root / "daemon.yml"
    path.write_text(yaml.safe_dump(values))
    return DaemonProcess(path, root / "data", env).start()
