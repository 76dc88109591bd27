"""The open-model pacer of the latency benchmarks (benchmarks/_common.py): its two waiting modes.

Latency figures count from each tick's scheduled time, so the one property that makes them
honest is that no tick starts before its time; how late a tick starts is the benchmark's own
``pacer`` row, not a unit test's business (no timing thresholds here).
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Iterator

import pytest

from benchmarks import _common


@pytest.fixture(autouse=True)
def _restore_mode() -> Iterator[None]:
    yield
    _common.set_pacer("precise")


@pytest.mark.parametrize("mode", _common.PACER_MODES)
def test_no_tick_starts_before_its_scheduled_time(mode: str) -> None:
    _common.set_pacer(mode)

    async def ticks() -> list[tuple[float, float]]:
        start = time.perf_counter() + 0.005
        out = []
        for tick in range(60):
            scheduled = start + tick * 0.001
            out.append((scheduled, await _common.wait_until(scheduled)))
        return out

    readings = _common.run_paced(ticks())
    assert len(readings) == 60
    assert all(now >= scheduled for scheduled, now in readings)


def test_the_precise_mode_waits_on_select_and_the_spin_mode_on_the_default_loop() -> None:
    async def selector_of_running_loop() -> type[selectors.BaseSelector]:
        return type(asyncio.get_running_loop()._selector)  # type: ignore[attr-defined]

    _common.set_pacer("precise")
    assert _common.run_paced(selector_of_running_loop()) is selectors.SelectSelector
    _common.set_pacer("spin")
    assert _common.run_paced(selector_of_running_loop()) is selectors.DefaultSelector


def test_the_loop_runs_other_work_while_the_pacer_waits() -> None:
    """Acks arriving between ticks must be handled while waiting, not after the tick."""

    async def probe() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        handled = loop.create_future()
        loop.call_later(0.002, lambda: handled.set_result(time.perf_counter()))
        scheduled = time.perf_counter() + 0.02
        await _common.wait_until(scheduled)
        return handled.result(), scheduled

    for mode in _common.PACER_MODES:
        _common.set_pacer(mode)
        handled_at, scheduled = _common.run_paced(probe())
        assert handled_at < scheduled


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="pacer mode"):
        _common.set_pacer("busy")
