"""lkstream.server.settings: the daemon reads its configuration only through lkstream.config.load_config."""

from __future__ import annotations

from pathlib import Path

import pytest

from lkstream.errors import InvalidArgumentError
from lkstream.server.settings import ServerSettings, load_settings

REPO = Path(__file__).resolve().parents[2]


def test_conf_local_yml_loads_with_loopback_ports() -> None:
    settings, broker = load_settings(REPO / "conf" / "local.yml", env={})
    assert (settings.grpc_host, settings.grpc_port, settings.http_host, settings.http_port) == (
        "127.0.0.1",
        9090,
        "127.0.0.1",
        8080,
    )
    assert broker.persist_dir == "./data"


def test_file_env_and_overrides_stack_for_server_keys(tmp_path: Path) -> None:
    path = tmp_path / "c.yml"
    path.write_text("fsync_mode: none\nserver:\n  grpc_port: 1000\n  http_port: 2000\n")
    env = {"LKSTREAM_SERVER__HTTP_PORT": "3000", "LKSTREAM_FSYNC_MODE": "sync"}
    settings, broker = load_settings(path, {"server.grpc_port": 0, "server.http_port": None}, env=env)
    assert (settings.grpc_port, settings.http_port, broker.fsync_mode) == (0, 3000, "sync")
    assert load_settings(None, env={}) == (ServerSettings(), broker.model_copy(update={"fsync_mode": "group"}))


def test_bad_server_values_name_the_key_and_the_source(tmp_path: Path) -> None:
    path = tmp_path / "c.yml"
    path.write_text("server:\n  http_port: 70000\n")
    with pytest.raises(InvalidArgumentError, match=r"server\.http_port.*70000.*file .*c\.yml"):
        load_settings(path, env={})
    with pytest.raises(InvalidArgumentError, match=r"unknown key 'server\.grcp_port'.*LKSTREAM_SERVER__GRCP_PORT"):
        load_settings(None, env={"LKSTREAM_SERVER__GRCP_PORT": "1"})
    path.write_text("grpc_port: 1\n")  # server keys belong under `server:`
    with pytest.raises(InvalidArgumentError, match="unknown key 'grpc_port'"):
        load_settings(path, env={})
