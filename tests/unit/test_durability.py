"""lkstream.storage.durability: the group-commit thread and its three modes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from lkstream.errors import LkstreamError, StorageError
from lkstream.storage.durability import FsyncMode, GroupCommitter

DEADLINE_S = 10.0


class FakeLog:
    """A Flushable that counts flushes, can hold them, and can fail them."""

    def __init__(self, durable: int = 100) -> None:
        self.durable = durable
        self.calls = 0
        self.error: Exception | None = None
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()
        self.flushed = threading.Event()
        self.call_times: list[float] = []

    def flush(self) -> int:
        self.calls += 1
        self.call_times.append(time.monotonic())
        self.entered.set()
        assert self.hold.wait(DEADLINE_S), "test never released the held flush"
        self.flushed.set()
        if self.error is not None:
            raise self.error
        return self.durable


class Outcomes:
    """Collects durability callbacks; ``wait(n)`` blocks until n arrived."""

    def __init__(self) -> None:
        self.results: list[BaseException | None] = []
        self._cond = threading.Condition()

    def callback(self, error: BaseException | None) -> None:
        with self._cond:
            self.results.append(error)
            self._cond.notify_all()

    def wait(self, count: int) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.results) >= count, DEADLINE_S)


@pytest.fixture
def committers() -> Iterator[list[GroupCommitter]]:
    made: list[GroupCommitter] = []
    yield made
    for committer in made:
        committer.close()


def _committer(made: list[GroupCommitter], mode: FsyncMode, **kw: int) -> GroupCommitter:
    committer = GroupCommitter(mode, **kw)
    made.append(committer)
    return committer


def test_sync_mode_calls_back_after_the_covering_fsync(committers: list[GroupCommitter]) -> None:
    committer = _committer(committers, FsyncMode.SYNC)
    target, outcomes = FakeLog(durable=5), Outcomes()
    committer.when_durable(target, 5, outcomes.callback)
    assert outcomes.wait(1)
    assert outcomes.results == [None]
    assert target.calls == 1


def test_sync_mode_shares_one_fsync_among_concurrent_waiters(committers: list[GroupCommitter]) -> None:
    committer = _committer(committers, FsyncMode.SYNC)
    target, outcomes = FakeLog(durable=1000), Outcomes()
    target.hold.clear()
    committer.when_durable(target, 1, outcomes.callback)
    assert target.entered.wait(DEADLINE_S)  # round 1 is fsyncing; the rest must wait for round 2
    waiters = 20
    threads = [
        threading.Thread(target=committer.when_durable, args=(target, 2 + i, outcomes.callback)) for i in range(waiters)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_S)
    target.hold.set()
    assert outcomes.wait(1 + waiters)
    assert outcomes.results == [None] * (1 + waiters)
    assert target.calls == 2, "20 concurrent waiters should share the second fsync"


def test_sync_mode_reports_an_error_when_the_fsync_did_not_cover_the_offset(
    committers: list[GroupCommitter],
) -> None:
    committer = _committer(committers, FsyncMode.SYNC)
    target, outcomes = FakeLog(durable=3), Outcomes()
    committer.when_durable(target, 10, outcomes.callback)
    assert outcomes.wait(1)
    error = outcomes.results[0]
    assert isinstance(error, LkstreamError)
    assert "below 3, not 10" in str(error)


@pytest.mark.parametrize("mode", [FsyncMode.SYNC, FsyncMode.GROUP])
def test_callbacks_get_the_error_when_flush_raises(committers: list[GroupCommitter], mode: FsyncMode) -> None:
    committer = _committer(committers, mode)
    target, outcomes = FakeLog(), Outcomes()
    target.error = StorageError("cannot fsync (Input/output error)", path="/d/0.seg")
    committer.when_durable(target, 1, outcomes.callback)
    committer.when_durable(target, 2, outcomes.callback)
    assert outcomes.wait(2)
    assert all(result is target.error for result in outcomes.results)


def test_committer_thread_survives_a_failed_flush(committers: list[GroupCommitter]) -> None:
    committer = _committer(committers, FsyncMode.SYNC)
    target, outcomes = FakeLog(), Outcomes()
    target.error = StorageError("boom")
    committer.when_durable(target, 1, outcomes.callback)
    assert outcomes.wait(1)
    target.error = None
    committer.when_durable(target, 1, outcomes.callback)
    assert outcomes.wait(2)
    assert outcomes.results[1] is None


def test_a_raising_callback_does_not_stop_other_callbacks(committers: list[GroupCommitter]) -> None:
    committer = _committer(committers, FsyncMode.SYNC)
    target, outcomes = FakeLog(), Outcomes()
    target.hold.clear()
    committer.when_durable(target, 1, outcomes.callback)
    assert target.entered.wait(DEADLINE_S)

    def broken(error: BaseException | None) -> None:
        raise RuntimeError("callback bug")

    committer.when_durable(target, 1, broken)
    committer.when_durable(target, 1, outcomes.callback)
    target.hold.set()
    assert outcomes.wait(2)
    assert outcomes.results == [None, None]


def test_group_mode_flushes_once_group_bytes_are_waiting(committers: list[GroupCommitter]) -> None:
    committer = _committer(committers, FsyncMode.GROUP, interval_ms=60_000, group_bytes=1000)
    target = FakeLog()
    committer.written(target, 400)
    committer.written(target, 400)
    assert not target.flushed.wait(0.05), "flushed below the byte threshold and long before the interval"
    committer.written(target, 200)
    assert target.flushed.wait(DEADLINE_S)
    assert target.calls == 1


def test_group_mode_flushes_after_the_interval(committers: list[GroupCommitter]) -> None:
    interval_ms = 50
    committer = _committer(committers, FsyncMode.GROUP, interval_ms=interval_ms, group_bytes=10**9)
    target = FakeLog()
    written_at = time.monotonic()
    committer.written(target, 1)
    assert target.flushed.wait(DEADLINE_S)
    assert target.calls == 1
    assert target.call_times[0] - written_at >= interval_ms / 1000 * 0.9


def test_group_mode_flushes_every_dirty_log_in_one_round(committers: list[GroupCommitter]) -> None:
    committer = _committer(committers, FsyncMode.GROUP, interval_ms=60_000, group_bytes=100)
    first, second = FakeLog(), FakeLog()
    first.hold.clear()
    committer.written(first, 10)
    committer.written(second, 10)
    committer.written(second, 100)  # crosses the threshold: one round for both
    first.hold.set()
    assert first.flushed.wait(DEADLINE_S)
    assert second.flushed.wait(DEADLINE_S)
    assert (first.calls, second.calls) == (1, 1)


def test_group_mode_does_not_flush_a_clean_log(committers: list[GroupCommitter]) -> None:
    committer = _committer(committers, FsyncMode.GROUP, interval_ms=10, group_bytes=1)
    target = FakeLog()
    committer.written(target, 5)
    assert target.flushed.wait(DEADLINE_S)
    target.flushed.clear()
    assert not target.flushed.wait(0.1), "nothing was written since the last fsync"
    assert target.calls == 1


def test_none_mode_ignores_writes(committers: list[GroupCommitter]) -> None:
    committer = _committer(committers, FsyncMode.NONE, interval_ms=1, group_bytes=1)
    target = FakeLog()
    committer.written(target, 10**6)
    assert not target.flushed.wait(0.05)
    assert target.calls == 0


def test_close_runs_a_final_round_for_dirty_logs() -> None:
    committer = GroupCommitter(FsyncMode.GROUP, interval_ms=60_000, group_bytes=10**9)
    target = FakeLog()
    committer.written(target, 1)
    committer.close()
    assert target.calls == 1


def test_forget_drops_a_log_from_the_next_round() -> None:
    committer = GroupCommitter(FsyncMode.GROUP, interval_ms=60_000, group_bytes=10**9)
    target = FakeLog()
    committer.written(target, 1)
    committer.forget(target)
    committer.close()
    assert target.calls == 0


def test_when_durable_after_close_reports_an_error_at_once() -> None:
    committer = GroupCommitter(FsyncMode.SYNC)
    committer.close()
    outcomes = Outcomes()
    committer.when_durable(FakeLog(), 1, outcomes.callback)
    assert len(outcomes.results) == 1
    assert isinstance(outcomes.results[0], LkstreamError)
    assert "closed" in str(outcomes.results[0])


def test_on_fsync_observer_gets_each_fsync_duration(committers: list[GroupCommitter]) -> None:
    durations: list[float] = []
    seen = threading.Event()

    def observe(seconds: float) -> None:
        durations.append(seconds)
        seen.set()

    committer = GroupCommitter(FsyncMode.SYNC, on_fsync=observe)
    committers.append(committer)
    outcomes = Outcomes()
    committer.when_durable(FakeLog(), 1, outcomes.callback)
    assert outcomes.wait(1)
    assert seen.wait(DEADLINE_S)
    assert len(durations) == 1
    assert durations[0] >= 0.0


def test_fsync_mode_values_are_the_config_strings() -> None:
    assert [m.value for m in FsyncMode] == ["sync", "group", "none"]
    assert FsyncMode("group") is FsyncMode.GROUP


def test_a_write_while_the_next_round_is_scheduled_does_not_wake_the_committer(
    committers: list[GroupCommitter],
) -> None:
    """While writes keep coming the thread sleeps until its next round: no wake-up per round (issue 14, row 3).

    Each wake-up cost the writing event loop a context switch and a GIL hand-over. The write is
    still fsynced by the scheduled round, within one interval of the previous round.
    """
    committer = _committer(committers, FsyncMode.GROUP, interval_ms=1000, group_bytes=1 << 30)
    target = FakeLog()
    committer.written(target, 10)  # the thread was idle: this wakes it
    assert target.flushed.wait(DEADLINE_S)
    round_taken = target.call_times[0]
    notified: list[int] = []
    real_notify = committer._cond.notify

    def counting_notify(n: int = 1) -> None:
        notified.append(n)
        real_notify(n)

    committer._cond.notify = counting_notify  # type: ignore[method-assign]
    target.flushed.clear()
    committer.written(target, 10)
    assert notified == [], "the first write after a round woke the committer"
    assert target.flushed.wait(DEADLINE_S), "the scheduled round never fsynced the write"
    assert target.call_times[1] - round_taken >= 0.9  # the round it was scheduled for, not a wake-up


def test_an_idle_committer_still_wakes_for_the_first_write(committers: list[GroupCommitter]) -> None:
    committer = _committer(committers, FsyncMode.GROUP, interval_ms=20, group_bytes=1 << 30)
    target = FakeLog()
    committer.written(target, 10)
    assert target.flushed.wait(DEADLINE_S)
    deadline = time.monotonic() + DEADLINE_S
    while not committer._idle:  # the next round's time passes with nothing to do: idle again
        assert time.monotonic() < deadline, "the committer never went idle"
        time.sleep(0.005)
    target.flushed.clear()
    committer.written(target, 10)
    assert target.flushed.wait(DEADLINE_S), "an idle committer missed the first write"
    assert target.calls == 2
