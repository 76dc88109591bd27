"""The deployment recipes under deploy/ parse and agree with what the server serves.

No Docker engine or cluster runs here: the files are parsed and cross-checked
(ports, the data path, probe routes, metric names); the Prometheus files are
checked by ``promtool`` when it is installed (``scripts/install-system-deps.sh``).
"""

from __future__ import annotations

import configparser
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from lkstream.broker.metrics import METRIC_NAMES
from lkstream.server.http.app import DEFAULT_PORT, HEALTH_PATH, METRICS_PATH, READY_PATH

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
GRPC_PORT = 9090
HTTP_PORT = DEFAULT_PORT
KAFKA_PORT = 9092
ADMIN_PORT = 9644  # the admin listener: probes and scrapes (server.admin_port)
DATA_DIR = "/data"
CONFIG_PATH = "/etc/lkstream/config.yml"
SERVER_COMMAND = ["python", "-m", "lkstream.grpc_server", "--config", CONFIG_PATH]

PROMTOOL = shutil.which("promtool")
# `make test` installs promtool first (scripts/install-system-deps.sh); the skip only covers a
# bare `pytest` run on a machine without it, and names the command that fixes that.
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (Debian package `prometheus`; run scripts/install-system-deps.sh)",
)


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def load_yaml_docs(path: Path) -> list[Any]:
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def k8s_objects() -> dict[str, dict[str, Any]]:
    objects: dict[str, dict[str, Any]] = {}
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in load_yaml_docs(path):
            objects[doc["kind"]] = doc
    return objects


def test_every_yaml_and_json_file_parses() -> None:
    yaml_files = sorted([*DEPLOY.rglob("*.yml"), *DEPLOY.rglob("*.yaml")])
    json_files = sorted(DEPLOY.rglob("*.json"))
    assert len(yaml_files) >= 8 and json_files
    for path in yaml_files:
        assert load_yaml_docs(path), f"{path} is empty"
    for path in json_files:
        json.loads(path.read_text())


# -- Prometheus ----------------------------------------------------------------------------------


def alert_rules() -> dict[str, dict[str, Any]]:
    doc = load_yaml_docs(DEPLOY / "prometheus" / "alerts.yml")[0]
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}


def test_the_three_seed_alerts() -> None:
    rules = alert_rules()
    assert set(rules) == {"LkstreamConsumerLagHigh", "LkstreamDiskFreeLow", "LkstreamFsyncSlow"}
    lag = rules["LkstreamConsumerLagHigh"]["expr"]
    assert "lk_consumer_lag_seconds" in lag and "lkstream:consumer_lag_threshold_seconds" in lag
    doc = load_yaml_docs(DEPLOY / "prometheus" / "alerts.yml")[0]
    records = {r["record"]: r["expr"] for g in doc["groups"] for r in g["rules"] if "record" in r}
    assert records["lkstream:consumer_lag_threshold_seconds"].strip() == "vector(60)"
    disk = rules["LkstreamDiskFreeLow"]["expr"]
    assert "lk_disk_free_bytes" in disk and "lk_disk_total_bytes" in disk and "0.20" in disk
    fsync = rules["LkstreamFsyncSlow"]["expr"]
    assert "histogram_quantile(0.99" in fsync and "lk_fsync_latency_seconds_bucket" in fsync
    assert fsync.rstrip().endswith("> 1")


def exported_series() -> set[str]:
    names = set(METRIC_NAMES)
    for name in METRIC_NAMES:
        if name.endswith("_seconds") and "latency" in name:
            names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    return names


def test_queries_use_only_exported_metrics() -> None:
    """A renamed metric must not leave an alert or a panel silently empty."""
    exprs = [r["expr"] for r in alert_rules().values()]
    dashboard = json.loads((DEPLOY / "grafana" / "lkstream-dashboard.json").read_text())
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\blk_[a-z_]+", e)}
    assert used and used <= exported_series(), used - exported_series()


@needs_promtool
def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", "deploy/prometheus/alerts.yml", cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_rule_unit_tests_fire_the_alerts() -> None:
    result = promtool("test", "rules", "alerts_test.yml", cwd=DEPLOY / "prometheus")
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_check_config() -> None:
    result = promtool("check", "config", "prometheus.yml", cwd=DEPLOY / "prometheus")
    assert result.returncode == 0, result.stdout + result.stderr


def test_scrape_configs_target_the_metrics_route() -> None:
    local = load_yaml_docs(DEPLOY / "prometheus" / "prometheus.yml")[0]
    job = local["scrape_configs"][0]
    assert job["metrics_path"] == METRICS_PATH
    assert job["static_configs"][0]["targets"] == [f"127.0.0.1:{HTTP_PORT}"]
    assert "alerts.yml" in local["rule_files"]
    k8s = load_yaml_docs(DEPLOY / "prometheus" / "prometheus-kubernetes.yml")[0]
    relabels = k8s["scrape_configs"][0]["relabel_configs"]
    sources = {s for r in relabels for s in r.get("source_labels", [])}
    assert {
        "__meta_kubernetes_pod_annotation_prometheus_io_scrape",
        "__meta_kubernetes_pod_annotation_prometheus_io_port",
        "__meta_kubernetes_pod_annotation_prometheus_io_path",
    } <= sources


# -- Grafana -------------------------------------------------------------------------------------


def test_dashboard_has_the_panels() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "lkstream-dashboard.json").read_text())
    assert dashboard["title"] and dashboard["uid"] and isinstance(dashboard["schemaVersion"], int)
    titles = {p["title"] for p in dashboard["panels"]}
    assert {"Produce rate", "Consumer lag", "fsync p99", "Segment bytes", "In-flight bytes", "Disk free"} <= titles
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])
    by_title = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in dashboard["panels"]}
    assert "rate(lk_produced_total" in by_title["Produce rate"]
    assert "lk_consumer_lag_seconds" in by_title["Consumer lag"]
    assert "histogram_quantile(0.99" in by_title["fsync p99"]
    assert "lk_segment_size_bytes" in by_title["Segment bytes"]
    assert "lk_inflight_bytes" in by_title["In-flight bytes"]
    assert "lk_disk_free_bytes" in by_title["Disk free"]


# -- Docker --------------------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` with continuation lines joined and comments dropped."""
    text = (DEPLOY / "docker" / "Dockerfile").read_text()
    lines: list[tuple[str, str]] = []
    buffer = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        instruction, _, args = (buffer + line).partition(" ")
        lines.append((instruction.upper(), args.strip()))
        buffer = ""
    return lines


def test_dockerfile() -> None:
    lines = dockerfile()

    def get(name: str) -> list[str]:
        return [a for i, a in lines if i == name]

    assert get("FROM") == ["python:3.11-slim"]
    assert sorted(int(p) for a in get("EXPOSE") for p in a.split()) == [HTTP_PORT, GRPC_PORT, KAFKA_PORT, ADMIN_PORT]
    assert any(DATA_DIR in json.loads(a) for a in get("VOLUME"))
    users = get("USER")
    assert users and users[-1] not in ("root", "0")
    # USER comes after the steps that need root, and before CMD.
    order = [i for i, _ in lines]
    assert order.index("USER") > max(i for i, name in enumerate(order) if name == "RUN")
    health = get("HEALTHCHECK")
    # The baked config turns TLS on: the probe speaks HTTPS.
    assert len(health) == 1 and f"https://127.0.0.1:{ADMIN_PORT}{HEALTH_PATH}" in health[0]
    assert json.loads(get("CMD")[-1]) == SERVER_COMMAND
    copies = [shlex.split(a) for a in get("COPY")]
    config_copy = [c for c in copies if c[-1] == CONFIG_PATH]
    assert config_copy and (REPO / config_copy[0][0]).is_file(), "the baked config must exist in the repo"
    for copy in copies:
        for source in copy[:-1]:
            assert (REPO / source).exists(), f"COPY source {source} is missing (build context is the repo root)"


def test_healthcheck_command_is_valid_python() -> None:
    health = next(a for i, a in dockerfile() if i == "HEALTHCHECK")
    argv = json.loads(health.split("CMD", 1)[1])
    assert argv[:2] == ["python", "-c"]
    compile(argv[2], "<healthcheck>", "exec")


# -- the config the images and manifests ship ------------------------------------------------------


def shipped_config() -> dict[str, Any]:
    objects = k8s_objects()
    text = objects["ConfigMap"]["data"]["config.yml"]
    config = yaml.safe_load(text)
    assert isinstance(config, dict)
    return config


def test_configmap_config_matches_the_defaults() -> None:
    config = shipped_config()
    assert config["persist_dir"] == DATA_DIR
    assert config["server"]["http_port"] == HTTP_PORT
    assert config["server"]["grpc_port"] == GRPC_PORT
    assert config["server"]["admin_port"] == ADMIN_PORT
    # Inside a pod or container the probes come from outside the loopback interface.
    assert config["server"]["http_host"] == "0.0.0.0"
    assert config["server"]["grpc_host"] == "0.0.0.0"
    assert config["server"]["admin_host"] == "0.0.0.0"
    # The image bakes the same file.
    assert yaml.safe_load((REPO / "conf" / "example-prod.yml").read_text()) == config


def test_configmap_config_is_accepted_by_the_broker(tmp_path: Path) -> None:
    from lkstream.config import load_config

    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(shipped_config()))
    loaded = load_config(path, env={})
    assert loaded.broker.persist_dir == DATA_DIR


# -- Kubernetes ----------------------------------------------------------------------------------


def test_k8s_manifests() -> None:
    objects = k8s_objects()
    assert {"Deployment", "PersistentVolumeClaim", "ConfigMap", "Service"} <= set(objects)
    deployment = objects["Deployment"]
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"]["type"] == "Recreate"
    template = spec["template"]
    assert spec["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()

    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(ADMIN_PORT)
    assert annotations["prometheus.io/path"] == METRICS_PATH

    pod = template["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["command"] == SERVER_COMMAND
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": HTTP_PORT, "grpc": GRPC_PORT, "kafka": KAFKA_PORT, "admin": ADMIN_PORT}

    def probe_port(probe: dict[str, Any]) -> int:
        port = probe["httpGet"]["port"]
        return ports[port] if isinstance(port, str) else int(port)

    assert container["livenessProbe"]["httpGet"]["path"] == HEALTH_PATH
    assert container["readinessProbe"]["httpGet"]["path"] == READY_PATH
    # The probes use the admin listener: a flood of the HTTP port must not fail them (issue 28).
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert probe_port(container[probe]) == ADMIN_PORT, probe
    # TLS is on in the shipped config: every listener speaks HTTPS only, probes and scrapes included.
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS", probe
    assert annotations["prometheus.io/scheme"] == "https"

    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["data"] == DATA_DIR
    pvc = objects["PersistentVolumeClaim"]
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    config_map = objects["ConfigMap"]
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert f"{mounts['config']}/config.yml" == CONFIG_PATH
    assert "config.yml" in config_map["data"]

    service = objects["Service"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    service_ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert service_ports == {
        "grpc": (GRPC_PORT, "grpc"),
        "http": (HTTP_PORT, "http"),
        "kafka": (KAFKA_PORT, "kafka"),
    }

    kustomization = load_yaml_docs(DEPLOY / "k8s" / "kustomization.yaml")[0]
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in (DEPLOY / "k8s").glob("*.yaml")} - {"kustomization.yaml"}


# -- systemd -------------------------------------------------------------------------------------


def test_systemd_unit_follows_appendix_b() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(DEPLOY / "systemd" / "lkstream.service")
    assert unit["Unit"]["Description"] == "LKSTREAM Broker"
    assert "network.target" in unit["Unit"]["After"]
    service = unit["Service"]
    assert service["User"] == "lkstream" and service["Group"] == "lkstream"
    assert shlex.split(service["ExecStart"]) == ["/usr/bin/python", *SERVER_COMMAND[1:]]
    assert service["Restart"] == "on-failure"
    assert service["LimitNOFILE"] == "65536"
    assert DATA_DIR in service["ReadWritePaths"].split()
    assert unit["Install"]["WantedBy"] == "multi-user.target"
