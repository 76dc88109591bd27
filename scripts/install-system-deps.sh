#!/usr/bin/env bash
# System packages the test suite needs beyond the Python ones in pyproject.toml:
#   promtool (Debian package `prometheus`): tests/unit/test_deploy.py checks
#     deploy/prometheus/alerts.yml with `promtool check rules` / `promtool test rules`
#     and deploy/prometheus/prometheus.yml with `promtool check config`.
#   kcat (Debian package `kcat`): the kcat leg of the Kafka compatibility matrix
#     (tests/kafka_wire/test_clients.py).
#   java 17 with its compiler module (Debian package `openjdk-17-jdk-headless`): PySpark's JVM for
#     tests/spark, and the Java kafka-clients leg of the Kafka matrix, which runs
#     tests/kafka_wire/java/KafkaMatrix.java as a source file (that needs jdk.compiler, not in the JRE).
#   node and npm (Debian packages `nodejs`, `npm`): the KafkaJS leg of the Kafka matrix
#     (tests/kafka_wire/test_kafkajs.py runs `npm ci` in tests/kafka_wire/js on first use).
# Idempotent: installs only what is missing; run as root (CI runs as root) or with sudo.
set -euo pipefail

missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
if ! java -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])' || ! command -v javac >/dev/null 2>&1; then
    missing+=(openjdk-17-jdk-headless)
fi
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-system-deps: present: $(promtool --version 2>&1 | head -n 1); $(java -version 2>&1 | head -n 1)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

echo "install-system-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"

# The prometheus package's service is not wanted here: only its promtool binary.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
    $SUDO systemctl disable --now prometheus || true
fi

promtool --version
java -version
