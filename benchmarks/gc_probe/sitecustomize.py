"""Probe of pauses (issue 12, finding 9): put this directory on ``PYTHONPATH`` with ``PROBE_DIR`` set.

Every Python process started then (a daemon, a benchmark) appends to ``$PROBE_DIR/probe-<pid>.log``
each full garbage collection and each collection over 2 ms (wall time, generation, objects
tracked after a full one) and each ``os.fsync``/``os.fdatasync`` over 20 ms, with the thread,
stamped with ``time.time()`` to line up with a benchmark's own timeline. Not for production:
``gc.get_objects()`` after each full collection costs what it counts.

    PROBE_DIR=$PWD/.bench-tmp/probe PYTHONPATH=benchmarks/gc_probe \\
        .venv/bin/python benchmarks/bench_admin_isolation.py --quick --no-save
"""

import gc
import os
import sys
import threading
import time

_OUT = os.environ.get("PROBE_DIR")
if _OUT:
    _log = open(os.path.join(_OUT, f"probe-{os.getpid()}.log"), "a", buffering=1)  # noqa: SIM115 (process-long)
    _log.write(f"# argv {sys.argv!r}\n")
    _started: dict[str, float] = {}

    def _collected(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            _started["t"] = time.perf_counter()
            return
        took = time.perf_counter() - _started.get("t", time.perf_counter())
        full = info["generation"] == 2
        if took > 0.002 or full:
            tracked = len(gc.get_objects()) if full else -1
            _log.write(f"gc {time.time():.3f} gen{info['generation']} {took * 1e3:.1f}ms tracked={tracked}\n")

    gc.callbacks.append(_collected)

    def _timed(name: str) -> None:
        original = getattr(os, name)

        def call(fd: int) -> None:
            started = time.perf_counter()
            try:
                original(fd)
            finally:
                took = time.perf_counter() - started
                if took > 0.02:
                    _log.write(f"{name} {time.time():.3f} {took * 1e3:.1f}ms {threading.current_thread().name}\n")

        setattr(os, name, call)

    _timed("fsync")
    _timed("fdatasync")
