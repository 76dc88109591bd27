#!/usr/bin/env bash
# Run every benchmark at full size, one after the other (never concurrently: 2 cores).
# Usage: benchmarks/run_all.sh [--quick] [extra flags passed to every script]
# JSON results land in benchmarks/results/ (each script saves its own); progress logs beside them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
mkdir -p benchmarks/results
stamp=$(date -u +%Y%m%dT%H%M%SZ)
for bench in bench_producer bench_consumer bench_recovery; do
    extra=()
    if [[ $bench == bench_recovery && $(id -u) == 0 ]]; then
        extra=(--cold)  # dropping the page cache needs root
    fi
    echo "== $bench $* ${extra[*]}" >&2
    "$PY" "benchmarks/$bench.py" "$@" "${extra[@]}" \
        > /dev/null \
        2> >(tee "benchmarks/results/$bench-$stamp.log" >&2)
done
