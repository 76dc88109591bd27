"""lkstream.storage.clock: injected time."""

from __future__ import annotations

import time

from lkstream.storage.clock import ManualClock, SystemClock


def test_manual_clock_moves_only_when_advanced() -> None:
    clock = ManualClock(1_000)
    assert (clock.now_ms(), clock.monotonic_ms()) == (1_000, 0.0)
    clock.advance(250)
    assert (clock.now_ms(), clock.monotonic_ms()) == (1_250, 250.0)


def test_system_clock_tracks_wall_and_monotonic_time() -> None:
    clock = SystemClock()
    assert abs(clock.now_ms() - time.time() * 1000) < 1_000
    first = clock.monotonic_ms()
    assert clock.monotonic_ms() >= first
