"""Issue 24: a SIGKILL at any step of a log clean leaves the old segments or the new ones, never a mix.

For each step of lkstream.storage.swap (``cleaner_child.py`` names them), a broker process
cleaning a compacted topic is SIGKILLed right after that step. The data directory is then
opened again, and the log must read exactly as before the clean (killed before the commit
point) or exactly as a clean that ran to its end (killed after it): the same offsets, keys
and values, in order, with no ``.cleaned``, ``.swap`` or ``.deleted`` file left, ``lkstream
verify`` clean, and the log still taking appends where it ended.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lkstream import Broker
from lkstream.storage.cleaner import CleanerPolicy, clean_pass
from lkstream.storage.clock import ManualClock
from lkstream.storage.keymap import new_key_map
from lkstream.storage.verify import verify_data_dir

from ._support import Seed
from .cleaner_child import COMMITTED, NOW_MS, START_MS, STEPS

CHILD = str(Path(__file__).with_name("cleaner_child.py"))
View = list[tuple[int, bytes | None, bytes | None]]


def _build(data: Path, seed: Seed) -> None:
    """A compacted topic in small segments: keyed values, tombstones, and keys seen once."""
    rng = seed.rng()
    with Broker(
        persist_dir=str(data), segment_max_bytes=4096, log_cleaner_enabled=False, clock=ManualClock(START_MS)
    ) as b:
        b.create_topic("t", 1, configs={"cleanup.policy": "compact"})
        for n in range(300):
            key = f"k{rng.randrange(15)}".encode() if rng.random() < 0.8 else f"once-{n}".encode()
            value = None if rng.random() < 0.1 else f"v{n}".encode() * rng.randrange(1, 30)
            b.produce_many_sync("t", [(key, value)], partition=0)


def _view(data: Path) -> View:
    with Broker(persist_dir=str(data), segment_max_bytes=1 << 20, log_cleaner_enabled=False) as broker:
        out: View = []
        offset, end = 0, broker.partition("t", 0).high_watermark
        while offset < end:
            records = broker.read_from("t", 0, offset)
            out += [(r.offset, r.key, r.value) for r in records]
            offset = records[-1].offset + 1
        return out


def _cleaned_view(data: Path, scratch: Path) -> View:
    """What a clean that runs to its end leaves (on a copy, in this process)."""
    shutil.copytree(data, scratch)
    clock = ManualClock(NOW_MS)
    with Broker(persist_dir=str(scratch), segment_max_bytes=1 << 20, log_cleaner_enabled=False, clock=clock) as b:
        log = b.partition("t", 0).log
        policy = CleanerPolicy(delete_retention_ms=86_400_000)
        stats = clean_pass(log.cleaning_snapshot(), policy, new_key_map(1 << 20), clock.now_ms(), log.replace_segments)
        assert stats.groups == 1, "one group: every sealed segment in one rewrite"
    return _view(scratch)


@pytest.mark.parametrize("step", STEPS)
def test_a_clean_killed_at_any_step_leaves_the_old_log_or_the_new_one(
    step: str, tmp_path: Path, subprocess_env: dict[str, str], crash_seed: Seed
) -> None:
    data = tmp_path / "data"
    _build(data, crash_seed)
    old = _view(data)
    new = _cleaned_view(data, tmp_path / "reference")
    assert len(new) < len(old), f"the clean removes records {crash_seed}"
    done = subprocess.run(
        [sys.executable, CHILD, str(data), step],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, f"{step}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    after = _view(data)
    expected, outcome = (new, "new") if step in COMMITTED else (old, "old")
    assert after == expected, f"killed after {step!r}: the log is not the {outcome} one {crash_seed}"
    left = [n for n in os.listdir(data / "topics" / "t" / "part0") if n.endswith((".cleaned", ".swap", ".deleted"))]
    assert left == [], f"{step}: step files left after reopening {crash_seed}"
    report = verify_data_dir(str(data))
    assert report.errors == 0, report.problems
    with Broker(persist_dir=str(data), log_cleaner_enabled=False) as broker:
        end = broker.partition("t", 0).high_watermark
        assert end == old[-1][0] + 1, "the log end offset survives the clean"
        [(_, offset)] = broker.produce_many_sync("t", [(b"after", b"crash")], partition=0)
        assert offset == end
