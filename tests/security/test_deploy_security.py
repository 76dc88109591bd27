"""The shipped deployment recipes turn TLS and auth on, and never listen on 0.0.0.0 without them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lkstream.errors import InvalidArgumentError
from lkstream.server.settings import load_settings
from tests.security.conftest import SecureFactory
from tests.unit.test_deploy import DEPLOY, REPO, k8s_objects, shipped_config


def test_shipped_config_passes_the_loopback_rule_with_tls_and_auth(tmp_path: Path) -> None:
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(shipped_config()))
    settings, _ = load_settings(path, env={})  # raises if a non-loopback listener lacked TLS or auth
    assert settings.auth and settings.tls is not None
    assert settings.grpc_host == settings.http_host == settings.kafka_host == "0.0.0.0"


def test_shipped_config_without_tls_or_auth_would_be_refused(tmp_path: Path) -> None:
    for key in ("auth", "tls_cert_file"):
        config = shipped_config()
        server = {
            k: v
            for k, v in config["server"].items()
            if k not in (key, "tls_key_file" if key == "tls_cert_file" else "")
        }
        path = tmp_path / f"{key}.yml"
        path.write_text(yaml.safe_dump({**config, "server": server}))
        with pytest.raises(InvalidArgumentError, match="refusing to listen beyond this host"):
            load_settings(path, env={})


def test_k8s_mounts_the_tls_secret_where_the_config_looks() -> None:
    server = shipped_config()["server"]
    pod = k8s_objects()["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "lkstream-tls"
    for key in ("tls_cert_file", "tls_key_file"):
        assert Path(server[key]).parent == Path(mounts["tls"])
    # kubectl create secret tls names its files tls.crt and tls.key.
    assert {Path(server["tls_cert_file"]).name, Path(server["tls_key_file"]).name} == {"tls.crt", "tls.key"}


def test_example_prod_and_the_configmap_agree() -> None:
    assert yaml.safe_load((REPO / "conf" / "example-prod.yml").read_text()) == shipped_config()
    assert "lkstream users add admin --token" in (DEPLOY / "systemd" / "lkstream.service").read_text()


def test_the_images_healthcheck_passes_against_a_tls_daemon(secure_daemon: SecureFactory) -> None:
    from tests.unit.test_deploy import dockerfile

    daemon = secure_daemon(tls=True, admin_port=0)
    health = next(args for instruction, args in dockerfile() if instruction == "HEALTHCHECK")
    command = json.loads(health.split("CMD", 1)[1])
    port = daemon.process.admin_address.rsplit(":", 1)[1]  # the admin listener, as in the shipped config
    argv = [sys.executable, *command[1:-1], command[-1].replace(":9644/", f":{port}/")]
    assert subprocess.run(argv, timeout=30, check=False).returncode == 0
