"""lkstream.server.settings: the daemon reads its configuration only through lkstream.config.load_config."""

from __future__ import annotations

from pathlib import Path

import pytest

from lkstream.errors import InvalidArgumentError
from lkstream.server.grpc.limits import server_options
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


# -- connection limits (issue 12, finding 7) -------------------------------------------------------


def test_default_connection_caps_fit_beside_the_logs_files_under_a_1024_descriptor_limit() -> None:
    settings, broker = load_settings(None, env={})
    settings.check_descriptors(broker, soft_limit=1024)  # 512 for files, 3 x 128 + 64 for the rest
    settings.check_descriptors(broker, soft_limit=1_048_576)


def test_caps_that_could_take_the_logs_descriptors_are_refused_naming_every_key() -> None:
    settings, broker = load_settings(None, {"server.http_max_connections": 500}, env={})
    with pytest.raises(InvalidArgumentError) as info:
        settings.check_descriptors(broker, soft_limit=1024)
    message = str(info.value)
    for part in ("server.grpc_max_connections (128)", "server.http_max_connections (500)", "kafka_max_connections"):
        assert part in message
    assert "820 descriptors" in message and "only 512 are left" in message and "ulimit -n" in message


def test_a_disabled_kafka_listener_needs_no_descriptors_and_max_open_files_counts_when_set() -> None:
    settings, broker = load_settings(None, {"server.kafka_port": -1, "max_open_files": 600}, env={})
    assert "kafka_max_connections" not in settings.connection_caps()
    settings.check_descriptors(broker, soft_limit=600 + 2 * 128 + 64)
    with pytest.raises(InvalidArgumentError, match="open files"):
        settings.check_descriptors(broker, soft_limit=600 + 2 * 128 + 63)


@pytest.mark.parametrize(
    ("key", "value"),
    [("grpc_max_connections", 0), ("http_idle_timeout_s", 0), ("read_timeout_s", -1), ("kafka_max_connections", 10**6)],
)
def test_limit_settings_out_of_range_are_refused(key: str, value: int) -> None:
    with pytest.raises(InvalidArgumentError, match=f"server.{key}"):
        load_settings(None, {f"server.{key}": value}, env={})


def test_grpc_core_buffers_less_unasked_data_than_the_admission_budget_at_defaults() -> None:
    """What gRPC core reads ahead of the handlers (one window per connection) is not admitted, so it must stay
    a fraction of ``max_admitted_bytes`` at the default connection cap, or raising the window undoes issue 12."""
    settings, broker = load_settings(None, env={})
    options = dict(server_options(settings, message_limit=64 * 1024 * 1024))
    assert options["grpc.http2.bdp_probe"] == 0, "BDP probing grows windows past the admission budget"
    window = options["grpc.http2.lookahead_bytes"]
    assert window >= 256 * 1024, "a 1,000-record produce of 200 B values should arrive without a window update"
    assert window * settings.grpc_max_connections <= broker.max_admitted_bytes // 2
