#!/usr/bin/env bash
# System packages the test suite needs beyond the Python ones in pyproject.toml.
#   promtool (Debian package `prometheus`): tests/unit/test_deploy.py checks
#   deploy/prometheus/alerts.yml with `promtool check rules` / `promtool test rules`
#   and deploy/prometheus/prometheus.yml with `promtool check config`.
# Idempotent; run as root (CI runs as root). Skips the install when promtool is already there.
set -euo pipefail

if command -v promtool >/dev/null 2>&1; then
    echo "install-system-deps: promtool present ($(promtool --version 2>&1 | head -n 1))"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends prometheus

# The package's service is not wanted here: only its promtool binary.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
    $SUDO systemctl disable --now prometheus || true
fi

promtool --version
