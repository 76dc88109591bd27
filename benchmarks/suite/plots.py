"""PNG plots of a suite result, for docs/benchmarks.md (matplotlib, no display needed).

    .venv/bin/python -m benchmarks.suite.plots benchmarks/results/peers-<stamp>.json [--out docs/img]

Writes ``peers_produce.png`` and ``peers_consume.png`` (throughput by system and message size,
1 and 8 partitions; bars are medians, whiskers min-max), ``peers_latency_cdf.png`` (ack and
produce-to-consume latency CDFs, the run with the median p99 of each system) and
``peers_fsync_knee.png`` (seed 002's batch x fsync sweep, log-log).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from benchmarks.suite.core import MiB

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "docs" / "img"


def _label(doc: dict[str, Any], system: str) -> str:
    return str(doc["systems"][system]["label"])


def throughput_plot(doc: dict[str, Any], metric: str, out: Path) -> Path:
    agg = [a for a in doc["aggregate"] if a["metric"] == metric]
    systems = [s for s in doc["systems"] if any(a["system"] == s for a in agg)]
    sizes = sorted({a["value_bytes"] for a in agg})
    parts = sorted({a["partitions"] for a in agg})
    fig, axes = plt.subplots(1, len(parts), figsize=(6 * len(parts), 4.2), squeeze=False, sharey=True)
    width = 0.8 / max(1, len(systems))
    for ax, p in zip(axes[0], parts, strict=True):
        for i, system in enumerate(systems):
            med, lo, hi = [], [], []
            for size in sizes:
                a = next(
                    (x for x in agg if (x["system"], x["value_bytes"], x["partitions"]) == (system, size, p)), None
                )
                s = a["MB_per_s"] if a else {"median": 0.0, "min": 0.0, "max": 0.0}
                med.append(s["median"])
                lo.append(s["median"] - s["min"])
                hi.append(s["max"] - s["median"])
            xs = [j + (i - (len(systems) - 1) / 2) * width for j in range(len(sizes))]
            ax.bar(xs, med, width, yerr=[lo, hi], capsize=2, label=_label(doc, system))
        ax.set_xticks(range(len(sizes)), [f"{s} B" if s < 1024 else f"{s // 1024} KiB" for s in sizes])
        ax.set_title(f"{metric}, {p} partition(s)")
        ax.set_ylabel("MB/s (values)")
        ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3, which="both")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{metric} throughput, median of {doc['runs']} run(s), {doc['utc']}")
    fig.tight_layout()
    path = out / f"peers_{metric}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def median_run(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The row whose p99 is the median of the rows' (the run drawn in a CDF)."""
    p99 = statistics.median_low([r["p99_ms"] for r in rows])
    return next(r for r in rows if r["p99_ms"] == p99)


def latency_plot(doc: dict[str, Any], out: Path) -> Path:
    phases = [
        ("ack_10k", "ack @ 10k msg/s"),
        ("ack_80pct", "ack @ 80% of ceiling"),
        ("e2e_10k", "produce-to-consume @ 10k msg/s"),
    ]
    fig, axes = plt.subplots(1, len(phases), figsize=(6 * len(phases), 4.2), squeeze=False)
    for ax, (metric, title) in zip(axes[0], phases, strict=True):
        for system in doc["systems"]:
            rows = [r for r in doc["raw"] if r["system"] == system and r["metric"] == metric and r.get("cdf")]
            if not rows:
                continue
            row = median_run(rows)
            xs = [max(p[0], 1e-3) for p in row["cdf"]]
            ys = [p[1] for p in row["cdf"]]
            ax.plot(xs, ys, label=f"{_label(doc, system)} (p99 {row['p99_ms']:.1f} ms)")
        ax.set_xscale("log")
        ax.set_xlabel("latency ms (log)")
        ax.set_ylabel("fraction of messages")
        ax.set_title(title + ", 1 KiB")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "peers_latency_cdf.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def knee_plot(doc: dict[str, Any], out: Path) -> Path | None:
    sweep = (doc.get("extras") or {}).get("sweep")
    if not sweep:
        return None
    sizes = sorted(sweep["MB_per_s"], key=int)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for mode, style in (("none", "o-"), ("interval", "s-"), ("sync", "^-")):
        xs = [int(s) / 1024 for s in sizes]
        med = [sweep["MB_per_s"][s][mode]["median"] for s in sizes]
        lo = [m - sweep["MB_per_s"][s][mode]["min"] for m, s in zip(med, sizes, strict=True)]
        hi = [sweep["MB_per_s"][s][mode]["max"] - m for m, s in zip(med, sizes, strict=True)]
        label = {"none": "no fsync", "interval": "fsync every 100 ms", "sync": "fsync each batch"}[mode]
        ax.errorbar(xs, med, yerr=[lo, hi], fmt=style, capsize=3, label=label)
    knee = sweep["knee_of_medians"]
    if knee.get("knee_model_bytes"):
        ax.axvline(
            knee["knee_model_bytes"] / 1024,
            color="grey",
            linestyle="--",
            label=f"model knee {knee['knee_model_bytes'] / MiB:.1f} MiB",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batch size KiB (log)")
    ax.set_ylabel("acked MB/s (log)")
    ax.set_title("LKSTREAM storage: batch size x fsync policy")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "peers_fsync_knee.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("result")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="directory of the PNGs (default docs/img)")
    args = parser.parse_args(argv)
    doc = json.loads(Path(args.result).read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    made = [
        throughput_plot(doc, "produce", out),
        throughput_plot(doc, "consume", out),
        latency_plot(doc, out),
        knee_plot(doc, out),
    ]
    for path in made:
        if path is not None:
            print(path)


if __name__ == "__main__":
    main()
