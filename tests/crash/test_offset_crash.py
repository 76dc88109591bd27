"""SIGKILL a real process committing offsets: every acknowledged commit survives, nothing else appears.

The child (this file run as a script) commits from several threads through
:class:`~lkstream.storage.offsets.OffsetStore` with a small ``compact_bytes``, so
kills land in appends, group-commit fsyncs and compactions alike. Thread ``w``
commits, at step ``i`` of run ``r`` (``v = r * 10**6 + i``), atomically::

    group "w{w}":  ("t", i % 3) -> v   and   ("all", 0) -> v

and prints ``A w{w} i`` once ``commit_many`` returned. One more thread uses the
non-blocking :meth:`~OffsetStore.submit` (up to ``WINDOW`` in flight) on
``("async", "t", 0)`` and prints ``S v`` from the durability callback.
``--die-at STAGE`` makes the child SIGKILL itself inside its second compaction.

After each kill the parent reopens the directory and checks, exactly: a key is
at its last acknowledged value or at the one commit that was in flight, and the
two keys of one commit never disagree.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

THREADS = 3
WINDOW = 16
RUN_SCALE = 10**6


# -- the child ---------------------------------------------------------------------------------------


def child_main(argv: list[str]) -> None:
    from lkstream.storage.offsets import OffsetStore

    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--run", type=int, required=True)
    parser.add_argument("--die-at", default="")
    args = parser.parse_args(argv)
    store = OffsetStore(args.dir, compact_bytes=16 * 1024, sweep_tmp=True)
    assert store.journal is not None
    compactions = 0

    def hook(stage: str) -> None:
        nonlocal compactions
        if stage == "snapshot-written":
            compactions += 1
        if stage == args.die_at and compactions >= 2:
            os.kill(os.getpid(), signal.SIGKILL)

    store.journal.stage_hook = hook
    out_lock = threading.Lock()

    def say(line: str) -> None:
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def committer(w: int) -> None:
        for i in range(RUN_SCALE):
            v = args.run * RUN_SCALE + i
            store.commit_many(f"w{w}", {("t", i % 3): v, ("all", 0): v})
            say(f"A w{w} {i}")

    def submitter() -> None:
        window = threading.Semaphore(WINDOW)
        for i in range(RUN_SCALE):
            window.acquire()
            v = args.run * RUN_SCALE + i

            def done(error: BaseException | None, v: int = v) -> None:
                # Say first: released before its line is out, a kill in between would let the
                # window run one step past the last printed ack (the parent allows WINDOW).
                if error is None:
                    say(f"S {v}")
                window.release()

            store.submit("async", {("t", 0): v}, done)

    say("READY")
    threads = [threading.Thread(target=committer, args=(w,), daemon=True) for w in range(THREADS)]
    threads.append(threading.Thread(target=submitter, daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# -- the parent --------------------------------------------------------------------------------------


class Child:
    """The child process; stdout read by a thread into a queue (reads have deadlines)."""

    def __init__(self, data_dir: Path, run: int, stderr_path: Path, die_at: str = "") -> None:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        self._stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")  # noqa: SIM115 (closed in kill())
        cmd = [sys.executable, __file__, "--dir", str(data_dir), "--run", str(run)]
        if die_at:
            cmd += ["--die-at", die_at]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._stderr, env=env)
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.acked: dict[str, int] = {}  # thread -> last acknowledged step
        self.async_acked: list[int] = []
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            self.lines.put(line)
        self.lines.put(None)

    def _take(self, line: bytes) -> None:
        if not line.endswith(b"\n"):
            return  # cut by the kill: never fully acknowledged
        parts = line.decode().split()
        if parts[0] == "A":
            self.acked[parts[1]] = max(self.acked.get(parts[1], -1), int(parts[2]))
        elif parts[0] == "S":
            self.async_acked.append(int(parts[1]))

    def read(self, until: int, deadline: float) -> bool:
        """Take lines until ``until`` acks arrived; False at EOF (the child killed itself)."""
        while sum(self.acked.values()) + len(self.async_acked) < until:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"child stalled; stderr:\n{self.stderr()}") from None
            if line is None:
                return False
            if line == b"READY\n":
                continue
            self._take(line)
        return True

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._pump.join(timeout=30)
        while (line := self.lines.get_nowait() if not self.lines.empty() else None) is not None:
            self._take(line)
        self._stderr.close()

    def stderr(self) -> str:
        self._stderr.flush()
        return self._stderr_path.read_text(errors="replace")[-3000:]


def check_recovered(data_dir: Path, run: int, child: Child, before: dict[tuple[str, str, int], int]) -> None:
    from lkstream.storage.offsets import OffsetStore

    with OffsetStore(str(data_dir)) as store:
        now = store.list_committed()
    base = run * RUN_SCALE
    for w in range(THREADS):
        group = f"w{w}"
        last = child.acked.get(group, -1)  # the next step, last + 1, may have been in flight
        allowed_all = {base + last + 1} | ({base + last} if last >= 0 else {before.get((group, "all", 0))})
        got_all = now.get((group, "all", 0))
        assert got_all in allowed_all, f"{group} all={got_all}, acked step {last}, before {before}"
        for p in range(3):
            steps = [i for i in range(last + 1) if i % 3 == p]
            expected = {base + steps[-1]} if steps else {before.get((group, "t", p))}
            if (last + 1) % 3 == p:
                expected.add(base + last + 1)
            got = now.get((group, "t", p))
            assert got in expected, f"{group} t[{p}]={got}, expected one of {expected} (acked step {last})"
        # Both keys of one commit_many land together: if the in-flight step landed, all of it did.
        if got_all == base + last + 1:
            assert now.get((group, "t", (last + 1) % 3)) == base + last + 1
    got_async = now.get(("async", "t", 0))
    if child.async_acked:
        newest = max(child.async_acked)
        assert got_async is not None and newest <= got_async < newest + WINDOW + 1, (got_async, newest)
    else:
        assert got_async == before.get(("async", "t", 0)) or (got_async or 0) >= base


@pytest.mark.slow
@pytest.mark.parametrize("die_at", ["", "snapshot-written", "journal-swapped"])
def test_sigkill_loses_no_acknowledged_commit(tmp_path: Path, die_at: str) -> None:
    import random

    rng = random.Random(f"{os.environ.get('LKSTREAM_CRASH_SEED', '')}:{die_at}")
    data_dir = tmp_path / "data"
    before: dict[tuple[str, str, int], int] = {}
    for run in range(1, 4):
        child = Child(data_dir, run, tmp_path / f"stderr-{run}", die_at=die_at)
        try:
            if die_at:  # the child kills itself inside its second compaction
                assert not child.read(10**9, time.monotonic() + 120), "the child never reached " + die_at
            else:
                assert child.read(rng.randrange(50, 1500), time.monotonic() + 120), child.stderr()
        finally:
            child.kill()
        assert child.proc.returncode == -signal.SIGKILL, child.stderr()
        assert child.acked, f"no commit acknowledged before the kill; stderr:\n{child.stderr()}"
        check_recovered(data_dir, run, child, before)
        from lkstream.storage.offsets import OffsetStore

        with OffsetStore(str(data_dir)) as store:
            before = store.list_committed()


if __name__ == "__main__":
    child_main(sys.argv[1:])
