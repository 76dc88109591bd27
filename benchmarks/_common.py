"""Shared plumbing for the LKSTREAM benchmarks (not a benchmark itself).

Every benchmark script:

* takes ``--quick`` (small sizes, a smoke run) and ``--runs N`` (default 3);
* uses fixed payloads and seeds, so two runs write byte-identical logs;
* keeps its data in a temporary directory on the same filesystem as the
  repository (``<repo>/.bench-tmp/``) and deletes it afterwards;
* prints one JSON document on stdout (progress goes to stderr) and writes the
  same document to ``benchmarks/results/<name>-<UTC timestamp>.json``, with the
  machine facts that make the figures comparable.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import hashlib
import importlib.metadata
import json
import os
import platform
import selectors
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "benchmarks" / "results"
DEFAULT_TMP_ROOT = REPO / ".bench-tmp"
# Never let a benchmark eat the disk: refuse to start below this much free space afterwards.
KEEP_FREE_BYTES = 20 * 1024**3
GB = 1000**3
MB = 1000**2
MiB = 1024**2
GiB = 1024**3

_STARTED = time.monotonic()

# The seed's produce pattern (issue 14): ~50 repeating ticker symbols as ``str`` keys.
TICKERS = [
    "AAPL", "MSFT", "GOOG", "AMZN", "NVDA", "META", "TSLA", "BRK.B", "JPM", "V",
    "UNH", "XOM", "JNJ", "WMT", "MA", "PG", "AVGO", "HD", "CVX", "LLY",
    "MRK", "ABBV", "PEP", "KO", "COST", "ADBE", "BAC", "CSCO", "MCD", "CRM",
    "TMO", "ACN", "NFLX", "AMD", "LIN", "ABT", "DHR", "ORCL", "DIS", "WFC",
    "TXN", "PM", "VZ", "INTC", "NKE", "CMCSA", "NEE", "UPS", "QCOM", "IBM",
]  # fmt: skip


def log(message: str) -> None:
    """Progress line on stderr (stdout carries only the JSON result)."""
    print(f"[{time.monotonic() - _STARTED:8.1f}s] {message}", file=sys.stderr, flush=True)


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run in seconds")
    parser.add_argument("--runs", type=int, default=3, help="repetitions per measurement (default 3)")
    parser.add_argument(
        "--tmp-root",
        default=str(DEFAULT_TMP_ROOT),
        help="where data lives while the benchmark runs (same filesystem as the repo)",
    )
    parser.add_argument("--no-save", action="store_true", help="print JSON only; do not write benchmarks/results/")
    parser.add_argument("--seed", type=int, default=20240601, help="seed of payloads and choices")
    return parser


# -- the open-model pacer's clock -----------------------------------------------------------------

#: How the open-model pacers (``bench_latency.open_model``, ``daemon_latency.paced``) wait for a tick:
#:
#: ``precise`` (default)
#:     the event loop uses ``select()``, whose timeout is in microseconds: the pacer sleeps in the
#:     loop until :data:`PRECISE_LEAD_S` before the tick, then yields to the loop until it is due.
#: ``spin``
#:     the default ``epoll`` loop, whose timeout is in whole milliseconds (a timer fires up to 1 ms
#:     late): the pacer sleeps until :data:`SPIN_LEAD_S` before the tick and yields from there. With
#:     1 ms ticks that is always, so the benchmark process keeps one of this machine's two cores
#:     busy and the processes under test share the other (docs/benchmarks-notes.md, "The pacer's core").
#:
#: Either way a tick never starts early and the loop keeps running acks while it waits.
PACER_MODES = ("precise", "spin")
PRECISE_LEAD_S = 0.0002
SPIN_LEAD_S = 0.0015
_pacer_mode = ["precise"]

_T = TypeVar("_T")


def add_pacer_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pacer", choices=PACER_MODES, default="precise", help="how the open-model pacer waits (see _common.py)"
    )


def set_pacer(mode: str) -> None:
    if mode not in PACER_MODES:
        raise ValueError(f"pacer mode {mode!r}: one of {PACER_MODES}")
    _pacer_mode[0] = mode


def pacer_mode() -> str:
    return _pacer_mode[0]


def run_paced(coro: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(coro)`` on the loop the pacer mode waits with.

    ``select()`` handles descriptors below 1,024 only; the harness's loop holds a handful (the
    clients under test run their own loops or threads).
    """
    if pacer_mode() == "spin":
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(selectors.SelectSelector())) as runner:
        return runner.run(coro)


async def wait_until(scheduled: float) -> float:
    """Wait in the running loop until ``time.perf_counter()`` reaches ``scheduled``; return that reading."""
    lead = SPIN_LEAD_S if pacer_mode() == "spin" else PRECISE_LEAD_S
    now = time.perf_counter()
    if scheduled - now > lead:
        await asyncio.sleep(scheduled - now - lead)
        now = time.perf_counter()
    while scheduled > now:  # never send early: a latency must not start before its send
        await asyncio.sleep(0)
        now = time.perf_counter()
    return now


# -- statistics ------------------------------------------------------------------------------------


def summary(values: Sequence[float], digits: int = 3) -> dict[str, Any]:
    """Median and min-max of per-run values (and the values themselves)."""
    vals = [float(v) for v in values]
    return {
        "median": round(statistics.median(vals), digits),
        "min": round(min(vals), digits),
        "max": round(max(vals), digits),
        "runs": [round(v, digits) for v in vals],
    }


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (q in [0, 100])."""
    if not sorted_values:
        return float("nan")
    rank = max(1, int(-(-q * len(sorted_values) // 100)))  # ceil(q/100 * n)
    return sorted_values[min(rank, len(sorted_values)) - 1]


def verdict(measured: float, target: float, higher_is_better: bool = True) -> str:
    ok = measured >= target if higher_is_better else measured < target
    return "pass" if ok else "miss"


# -- machine facts ---------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def fs_info(path: str | Path) -> dict[str, Any]:
    """Filesystem type, device and mount point holding ``path`` (from /proc/mounts)."""
    target = os.path.realpath(path)
    best: tuple[str, str, str] = ("", "unknown", "unknown")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount, fstype = line.split()[:3]
            inside = target == mount or target.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) >= len(best[0]):
                best = (mount, fstype, device)
    except OSError:
        pass
    usage = shutil.disk_usage(target)
    info: dict[str, Any] = {
        "path": target,
        "mount": best[0],
        "fs_type": best[1],
        "device": best[2],
        "disk_total_bytes": usage.total,
        "disk_free_bytes": usage.free,
    }
    dev = os.path.basename(best[2])
    queue = Path("/sys/block") / dev / "queue"
    if queue.is_dir():
        for name in ("rotational", "scheduler"):
            with contextlib.suppress(OSError):
                info[f"block_{name}"] = (queue / name).read_text().strip()
    return info


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "python_impl": platform.python_implementation()}
    for dist in ("lkstream", "aiokafka", "crc32c", "cramjam", "pydantic"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "missing"
    return out


def _git() -> dict[str, Any]:
    def run(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=REPO, capture_output=True, text=True, check=False, timeout=10
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    # "XY path" lines: the working tree may differ from the commit (others edit lkstream/ too)
    changed = [line.rstrip() for line in run("status", "--porcelain", "--", "lkstream").splitlines() if line]
    digest = hashlib.sha1()
    for path in sorted((REPO / "lkstream").rglob("*.py")):
        digest.update(path.relative_to(REPO).as_posix().encode() + b"\0" + path.read_bytes())
    return {
        "commit": run("rev-parse", "HEAD").strip(),
        "lkstream_changes_vs_commit": changed,
        "lkstream_source_sha1": digest.hexdigest(),  # identifies the exact code measured
    }


def machine_facts(data_path: str | Path) -> dict[str, Any]:
    uname = platform.uname()
    return {
        "hostname": uname.node,
        "cores": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "mem_total_bytes": _mem_total_bytes(),
        "kernel": f"{uname.system} {uname.release}",
        "machine": uname.machine,
        "loadavg_at_start": list(os.getloadavg()),
        "versions": _versions(),
        "git": _git(),
        "filesystem": fs_info(data_path),
    }


# -- data directories and results ------------------------------------------------------------------


def check_free_space(path: str | Path, need_bytes: int, keep_free: int = KEEP_FREE_BYTES) -> None:
    """Refuse to run if writing ``need_bytes`` would leave less than ``keep_free`` free."""
    free = shutil.disk_usage(path).free
    if free - need_bytes < keep_free:
        raise SystemExit(
            f"not enough disk: {free / GB:.1f} GB free at {path}, the run needs "
            f"{need_bytes / GB:.1f} GB and must leave {keep_free / GB:.0f} GB free"
        )
    log(f"disk: {free / GB:.1f} GB free, run needs ~{need_bytes / GB:.1f} GB")


@contextlib.contextmanager
def bench_dir(tmp_root: str | Path, name: str) -> Iterator[Path]:
    """A fresh directory under ``tmp_root``, removed (with ``tmp_root`` if empty) afterwards."""
    root = Path(tmp_root)
    root.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    path = root / f"{name}-{stamp}-{os.getpid()}"
    path.mkdir()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(OSError):
            root.rmdir()  # only if nothing else is in it


def utc_stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def command_line() -> str:
    """How this benchmark was started, as a user types it: ``python -m benchmarks.e2e.x --flags``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    start = ["-m", spec.name] if spec is not None and spec.name else sys.argv[:1]
    return " ".join([Path(sys.executable).name, *start, *sys.argv[1:]])


def emit(name: str, args: argparse.Namespace, payload: dict[str, Any], facts: dict[str, Any]) -> None:
    """Print the result JSON and save it under benchmarks/results/."""
    facts = {**facts, "loadavg_at_end": list(os.getloadavg())}
    doc = {
        "benchmark": name,
        "utc": utc_stamp(),
        "command": command_line(),
        "quick": args.quick,
        "runs": args.runs,
        "seed": args.seed,
        "machine": facts,
        **payload,
    }
    text = json.dumps(doc, indent=2, sort_keys=False)
    print(text, flush=True)
    if not args.no_save:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        suffix = "-quick" if args.quick else ""
        out = RESULTS_DIR / f"{name}{suffix}-{doc['utc']}.json"
        out.write_text(text + "\n")
        log(f"saved {out.relative_to(REPO)}")


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (VmRSS), 0 if the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def dir_bytes(path: str | Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, f)).st_size
    return total
