"""Print the targets of benchmark result files as a Markdown table (for docs/benchmarks.md).

    .venv/bin/python benchmarks/report.py benchmarks/results/bench_*.json

With no arguments, the newest complete result of every benchmark is used (not ``--quick``,
not ``--only``, not an ``--encoder`` experiment).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def newest() -> list[Path]:
    latest: dict[str, Path] = {}
    for path in sorted(RESULTS.glob("bench_*.json")):
        doc = json.loads(path.read_text())
        partial = "--only" in doc["command"] or doc.get("settings", {}).get("encoder", "aiokafka") != "aiokafka"
        if not doc.get("quick") and not partial:
            latest[doc["benchmark"]] = path  # names sort by UTC stamp
    return list(latest.values())


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or newest()
    print("| Target | Median | Min-max | Unit | Verdict | Result file |")
    print("|---|---|---|---|---|---|")
    for path in paths:
        doc = json.loads(path.read_text())
        for target in doc.get("targets", []):
            m = target["measured"]
            if "median" in m:
                median, span = fmt(m["median"]), f"{fmt(m['min'])} - {fmt(m['max'])}"
            else:
                median, span = json.dumps({k: v for k, v in m.items() if not isinstance(v, dict)}), ""
            print(f"| {target['target']} | {median} | {span} | {target['unit']} | {target['verdict']} | {path.name} |")
    for path in paths:
        git = json.loads(path.read_text())["machine"]["git"]
        changes = git.get("lkstream_changes_vs_commit", git.get("lkstream_dirty_files", []))
        print(f"\n{path.name}: commit {git['commit'][:10]}, lkstream changes vs commit: {len(changes)}")


if __name__ == "__main__":
    main()
