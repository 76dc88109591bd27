"""Cells, tables and the caption under each generated table (which files, when, on how busy a machine)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.suite.report import cell, num, table

__all__ = ["Result", "caption", "cell", "mb", "num", "per_run", "stat", "table"]


@dataclass(frozen=True)
class Result:
    """One result file: its path from the repository's root and its JSON document."""

    path: str
    doc: dict[str, Any]

    @property
    def name(self) -> str:
        return Path(self.path).name

    @property
    def when(self) -> str:
        """``2026-11-28 04:53 UTC`` from the document's stamp."""
        u = str(self.doc.get("utc", ""))
        return f"{u[0:4]}-{u[4:6]}-{u[6:8]} {u[9:11]}:{u[11:13]} UTC" if len(u) >= 13 else u

    @property
    def commit(self) -> str:
        return str(self.doc.get("machine", {}).get("git", {}).get("commit", "?"))[:7]

    @property
    def load(self) -> str:
        """The 1-minute load average at the start and at the end: how busy the shared machine was."""
        m = self.doc.get("machine", {})
        ends = [v[0] for v in (m.get("loadavg_at_start"), m.get("loadavg_at_end")) if v]
        return " -> ".join(f"{v:.1f}" for v in ends) or "?"

    @property
    def runs(self) -> int:
        runs = self.doc.get("runs", 1)
        return len(runs) if isinstance(runs, list) else int(runs)


def caption(*results: Result, note: str = "", once: bool = False) -> list[str]:
    """The italic line under a table: each source file (a link), its runs (``once``: a single long run
    whatever the document's ``runs`` says), date, commit and the load average at its start and end."""
    parts = []
    for r in results:
        runs = "one run" if once or r.runs == 1 else f"{r.runs} runs"
        parts.append(f"[`{r.name}`](../{r.path}) ({runs}, {r.when}, commit `{r.commit}`, load average {r.load})")
    return ["", f"*From {'; '.join(parts)}.{' ' + note if note else ''}*"]


def _mb(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def mb(summary: dict[str, Any] | None) -> str:
    """A bandwidth summary in MB/s with thousands separators: ``2,556 (2,397-2,684)``."""
    if not summary:
        return "n/a"
    if len(summary.get("runs", [])) <= 1 or summary["min"] == summary["max"]:
        return _mb(summary["median"])
    return f"{_mb(summary['median'])} ({_mb(summary['min'])}-{_mb(summary['max'])})"


def stat(values: list[float]) -> dict[str, Any]:
    """``median``, ``min``, ``max`` and ``runs`` of ``values`` (the shape ``cell`` prints)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {"median": median, "min": ordered[0], "max": ordered[-1], "runs": list(values)}


def per_run(summary: dict[str, Any] | None, scale: float = 1.0) -> dict[str, Any] | None:
    """A ``{median, min, max, runs}`` summary multiplied by ``scale`` (units), or None."""
    if not summary:
        return None
    return {k: ([v * scale for v in summary[k]] if k == "runs" else summary[k] * scale) for k in summary}
