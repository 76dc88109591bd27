"""lkstream.storage.swap: after a crash at any step of a segment rewrite, recovery leaves the old or the new.

Each state below is the directory a crash between two steps leaves (the crash tests in
tests/crash/test_cleaner_kill.py reach the same states with a SIGKILLed broker). The log
opened on it must hold exactly the records of one side, with no step file left over.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from lkstream.storage import swap
from lkstream.storage.clock import ManualClock
from lkstream.storage.log import LogConfig, PartitionLog

from .keyed import append, clean, read_all
from .support import FIXED_TS

CONFIG = LogConfig(segment_max_bytes=1200)


def _build(directory: str, clock: ManualClock) -> list[tuple[int, bytes | None, bytes | None]]:
    plog = PartitionLog(directory, "t", 0, CONFIG, clock=clock)
    rng = random.Random(17)
    for n in range(80):
        append(plog, clock, [(f"k{rng.randrange(6)}".encode(), f"v{n}".encode() * 5)])
    records = [(r.offset, r.key, r.value) for r in read_all(plog)]
    plog.close()
    return records


def _cleaned_view(directory: str, clock: ManualClock) -> list[tuple[int, bytes | None, bytes | None]]:
    plog = PartitionLog(directory, "t", 0, CONFIG, clock=clock)
    clean(plog, clock)
    records = [(r.offset, r.key, r.value) for r in read_all(plog)]
    plog.close()
    return records


def _steps_left(directory: str) -> list[str]:
    return [n for n in os.listdir(directory) if n.endswith((swap.CLEANED, swap.SWAP, swap.DELETED))]


StopAt = Callable[[str], None]


def _interrupted(directory: str, clock: ManualClock, step: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean whose first group stops for good after ``step`` (a crash there: later steps never run)."""

    class Crash(Exception):
        pass

    def stop_after(name: str) -> None:
        original = getattr(swap, name)

        def wrapped(*args: object, **kwargs: object) -> object:
            result = original(*args, **kwargs)
            if name == step:
                raise Crash
            return result

        monkeypatch.setattr(swap, name, wrapped)

    for name in ("commit", "retire", "install", "remove_retired"):
        stop_after(name)
    if step == "write":
        monkeypatch.setattr(swap.CleanedWriter, "finish", lambda self, sealed_ms: (_ for _ in ()).throw(Crash()))
        monkeypatch.setattr(swap.CleanedWriter, "abandon", lambda self: None)  # a crash cleans nothing up
    plog = PartitionLog(directory, "t", 0, CONFIG, clock=clock)
    with pytest.raises(Crash):
        clean(plog, clock)
    plog._closed = True  # the process "died": no close, no fsync, no checkpoint
    monkeypatch.undo()


@pytest.mark.parametrize(
    ("step", "outcome"),
    [
        ("write", "old"),
        ("commit", "new"),
        ("retire", "new"),
        ("install", "new"),
        ("remove_retired", "new"),
    ],
)
def test_a_rewrite_interrupted_after_any_step_leaves_one_side_whole(
    tmp_path: Path, step: str, outcome: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(FIXED_TS)
    reference, subject = str(tmp_path / "reference"), str(tmp_path / "subject")
    old = _build(reference, clock)
    _build(subject, clock)
    # The clean of the reference log goes through every step: the "new" side.
    new = _cleaned_view(reference, clock)
    assert new != old
    _interrupted(subject, clock, step, monkeypatch)
    plog = PartitionLog(subject, "t", 0, CONFIG, clock=clock)
    try:
        view = [(r.offset, r.key, r.value) for r in read_all(plog)]
        assert _steps_left(subject) == []
    finally:
        plog.close()
    if outcome == "old":
        assert view == old
    else:
        # The first group is new; later groups were never cleaned (the "crash" stopped the pass).
        first_end = int(sorted(n for n in os.listdir(reference) if n.endswith(".seg"))[1][:20])
        assert [v for v in view if v[0] < first_end] == [v for v in new if v[0] < first_end]
        assert [v for v in view if v[0] >= first_end] == [v for v in old if v[0] >= first_end]


def test_an_index_swap_without_its_segment_swap_is_dropped(tmp_path: Path) -> None:
    clock = ManualClock(FIXED_TS)
    directory = str(tmp_path / "p")
    records = _build(directory, clock)
    with open(os.path.join(directory, "00000000000000000000.idx.swap"), "wb") as f:
        f.write(b"\x00" * 16)
    with open(os.path.join(directory, "00000000000000000000.seg.cleaned"), "wb") as f:
        f.write(b"torn")
    plog = PartitionLog(directory, "t", 0, CONFIG, clock=clock)
    try:
        assert [(r.offset, r.key, r.value) for r in read_all(plog)] == records
        assert _steps_left(directory) == []
        assert set(plog.recovery.swept_files) >= {"00000000000000000000.idx.swap", "00000000000000000000.seg.cleaned"}
    finally:
        plog.close()
