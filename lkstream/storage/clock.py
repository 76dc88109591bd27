"""Injected time, so rolling, retention and group commit can be tested without sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (record timestamps, retention)."""
        ...

    def monotonic_ms(self) -> float:
        """Milliseconds from an arbitrary origin that never goes backward (intervals)."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> float:
        return time.monotonic() * 1000.0


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now = now_ms
        self._mono = 0.0

    def now_ms(self) -> int:
        return self._now

    def monotonic_ms(self) -> float:
        return self._mono

    def advance(self, ms: int) -> None:
        self._now += ms
        self._mono += ms
