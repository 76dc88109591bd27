"""The access-control settings and the rule that nothing listens beyond loopback without TLS and auth."""

from __future__ import annotations

from pathlib import Path

import pytest

from lkstream.errors import InvalidArgumentError
from lkstream.security.loopback import is_loopback_address, is_loopback_host
from lkstream.server.settings import load_settings

TLS = {"server.tls_cert_file": "/etc/lk/cert.pem", "server.tls_key_file": "/etc/lk/key.pem"}


def settings(**overrides: object) -> object:
    return load_settings(None, {k.replace("__", "."): v for k, v in overrides.items()}, env={})[0]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.4.5", "localhost", "LOCALHOST", "localhost.", "::1", "[::1]"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback_host(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "192.168.1.1", "example.com", "localhost.evil", ""])
def test_non_loopback_hosts(host: str) -> None:
    assert not is_loopback_host(host)


@pytest.mark.parametrize(
    "address", ["127.0.0.1:9090", "localhost:9090", "[::1]:9090", "ipv4:127.0.0.1:9090", "ipv6:[::1]:9090", "::1"]
)
def test_loopback_addresses(address: str) -> None:
    assert is_loopback_address(address)


@pytest.mark.parametrize(
    "address", ["10.0.0.5:9090", "example.com:9090", "[2001:db8::1]:9090", "dns:///localhost:9090", "0.0.0.0:9090"]
)
def test_non_loopback_addresses(address: str) -> None:
    """A scheme this check does not parse (``dns:///``) counts as remote: the token then needs TLS."""
    assert not is_loopback_address(address)


@pytest.mark.parametrize(
    ("overrides", "missing"),
    [
        ({"server.grpc_host": "0.0.0.0"}, "tls_cert_file and server.tls_key_file and server.auth: true"),
        ({"server.grpc_host": "0.0.0.0", **TLS}, "server.auth: true"),
        ({"server.http_host": "10.0.0.5", "server.auth": True}, "server.tls_cert_file and server.tls_key_file"),
    ],
)
def test_non_loopback_listener_needs_tls_and_auth(overrides: dict[str, object], missing: str) -> None:
    with pytest.raises(InvalidArgumentError, match="refusing to listen beyond this host") as refused:
        load_settings(None, overrides, env={})
    assert missing in str(refused.value)
    host_key = next(k for k in overrides if k.endswith("_host"))
    assert f"{host_key}={overrides[host_key]}" in str(refused.value)


def test_non_loopback_listener_with_tls_and_auth_is_accepted() -> None:
    found, _ = load_settings(
        None, {"server.grpc_host": "0.0.0.0", "server.http_host": "0.0.0.0", "server.auth": True, **TLS}, env={}
    )
    assert found.tls is not None and found.auth


@pytest.mark.parametrize(
    "overrides",
    [
        {"server.tls_cert_file": "c.pem"},
        {"server.tls_key_file": "k.pem"},
        {"server.tls_client_ca_file": "ca.pem"},
    ],
)
def test_tls_files_go_together(overrides: dict[str, object]) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid configuration: server: tls_"):
        load_settings(None, overrides, env={})


def test_lists_and_flags_from_the_environment() -> None:
    env = {
        "LKSTREAM_SERVER__AUTH": "true",
        "LKSTREAM_SERVER__SUPER_USERS": "admin, ops ,",
        "LKSTREAM_SERVER__HTTP_ALLOWED_ORIGINS": "https://a.example",
        "LKSTREAM_TOKEN": "not configuration: ignored by the daemon",
    }
    found, _ = load_settings(None, {}, env=env)
    assert found.auth and found.super_users == ["admin", "ops"] and found.http_allowed_origins == ["https://a.example"]


def test_security_files_default_under_the_data_directory(tmp_path: Path) -> None:
    found, config = load_settings(None, {"persist_dir": str(tmp_path)}, env={})
    assert found.security_files(config) == (
        str(tmp_path / "security" / "users.json"),
        str(tmp_path / "security" / "acls.json"),
    )
    found, config = load_settings(None, {"server.users_file": "/u.json", "server.acl_file": "/a.json"}, env={})
    assert found.security_files(config) == ("/u.json", "/a.json")


def test_auth_off_means_access_disabled(tmp_path: Path) -> None:
    found, config = load_settings(None, {"persist_dir": str(tmp_path)}, env={})
    assert not found.access(config).enabled
    found, config = load_settings(None, {"persist_dir": str(tmp_path), "server.auth": True}, env={})
    assert found.access(config).enabled
