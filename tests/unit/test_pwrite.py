"""lkstream.storage._pwrite: small appends keep the GIL through their pwrite (issue 14, row 3).

An append holds its log's lock across the write; a write that let go of the GIL let the
group-commit thread run exactly then, queue on the lock, and hold up the event loop's next append.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lkstream.errors import DiskFullError
from lkstream.storage import handles
from lkstream.storage.handles import GIL_HELD_WRITE_BYTES, FileBudget, pwrite_holding_gil


@pytest.fixture
def fd(tmp_path: Path) -> Iterator[int]:
    descriptor = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    yield descriptor
    os.close(descriptor)


@pytest.fixture
def long_switch_interval() -> Iterator[None]:
    """No forced GIL hand-over during the test: a thread runs only when the holder lets go."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(5.0)
    yield
    sys.setswitchinterval(interval)


def test_the_gil_holding_pwrite_is_built() -> None:
    """pip compiles lkstream/storage/_pwrite.c; without it every append invites other threads in."""
    assert handles.NATIVE_PWRITE, "lkstream.storage._pwrite is not built: run `make venv` (pip install -e .)"


def test_pwrite_holding_gil_writes_at_the_offset_like_os_pwrite(fd: int) -> None:
    assert pwrite_holding_gil(fd, b"hello", 0) == 5
    assert pwrite_holding_gil(fd, bytearray(b"XY"), 3) == 2
    assert pwrite_holding_gil(fd, memoryview(b"abc"), 10) == 3
    assert os.pread(fd, 100, 0) == b"helXY" + bytes(5) + b"abc"


def test_pwrite_holding_gil_raises_oserror_with_its_errno(tmp_path: Path) -> None:
    read_only = os.open(tmp_path / "ro", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        with pytest.raises(OSError) as caught:
            pwrite_holding_gil(read_only, b"x", 0)
    finally:
        os.close(read_only)
    assert caught.value.errno == errno.EBADF
    with pytest.raises(TypeError):
        pwrite_holding_gil(0, "text is not bytes", 0)  # type: ignore[arg-type]


def _other_thread_ran_during(work: Callable[[Callable[[], bool]], None]) -> bool:
    """Whether a thread that is ready to run got the GIL while ``work`` ran (no forced hand-over).

    ``work`` is given a function that says whether the other thread has run yet, so it may stop early.
    """
    gate = threading.Lock()
    gate.acquire()
    ran = threading.Event()

    def other() -> None:
        with gate:  # blocks, without the GIL, until released below
            ran.set()

    thread = threading.Thread(target=other)
    thread.start()
    # Wait until it blocks on the gate (it no longer needs the GIL): a wait with a deadline.
    for _ in range(1000):
        if not thread.is_alive() or _blocked(thread):
            break
        threading.Event().wait(0.001)
    gate.release()  # from here on it is ready, and runs as soon as this thread lets go of the GIL
    work(ran.is_set)
    during = ran.is_set()
    thread.join(10)
    assert ran.is_set(), "the other thread never ran"
    return during


def _blocked(thread: threading.Thread) -> bool:
    state = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state == "S"


def test_a_small_append_keeps_the_gil(tmp_path: Path, long_switch_interval: None) -> None:
    budget = FileBudget(16)
    target = budget.file(str(tmp_path / "seg"))
    batch = bytes(270)

    def appends(_: Callable[[], bool]) -> None:
        for _ in range(2000):
            target.append(batch)

    assert not _other_thread_ran_during(appends), "an append of 270 bytes let another thread run"
    assert target.size() == 2000 * 270
    target.close()


def test_a_large_append_still_lets_go_of_the_gil(tmp_path: Path, long_switch_interval: None) -> None:
    """A big copy (or a write the kernel stalls) must not hold every other thread up.

    Each such append lets go of the GIL for its pwrite, but takes it back as soon as the write
    returns: on a loaded machine the other thread, once woken, may find it taken again, for a
    whole run of appends (CI saw 200 in a row). So the appends go on until it has run, for up to
    2 s and 2,000 appends (128 MiB, written only when the test fails): well inside the 5 s switch
    interval, and nothing else in the loop lets go of the GIL (a truncate would: every os call does),
    so an append that kept the GIL still fails.
    """
    budget = FileBudget(16)
    target = budget.file(str(tmp_path / "seg"))
    batch = bytes(GIL_HELD_WRITE_BYTES + 1)

    def appends(other_ran: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 2.0
        for _ in range(2000):
            target.append(batch)
            if other_ran() or time.monotonic() > deadline:
                return

    assert _other_thread_ran_during(appends), "2,000 appends of 64 KiB never let another thread run"
    target.close()


def test_a_failed_small_append_is_rolled_back_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    budget = FileBudget(16)
    path = str(tmp_path / "seg")
    target = budget.file(path)
    target.append(b"keep")
    calls = {"n": 0}

    def torn(fd: int, data: bytes | bytearray | memoryview, position: int) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return os.pwrite(fd, bytes(data)[:3], position)  # a short write lands part of the data
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(handles, "pwrite_holding_gil", torn)
    with pytest.raises(DiskFullError):
        target.append(b"0123456789")
    monkeypatch.undo()
    assert target.size() == 4
    assert os.path.getsize(path) == 4
    assert target.append(b"!") == 4
    target.close()
