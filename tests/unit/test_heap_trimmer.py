"""Freed heap memory goes back to the OS once the admission budget drained after a burst (issue 12, finding 8)."""

from __future__ import annotations

import asyncio

from lkstream.broker.admission import AdmissionBudget
from lkstream.server.memory import HeapTrimmer, _glibc_malloc_trim

MiB = 1024 * 1024


async def _burst(budget: AdmissionBudget, size: int) -> None:
    held = [budget.try_admit(size, "grpc") for _ in range(4)]
    for admission in held:
        admission.release()


def test_a_drained_burst_is_trimmed_once_after_the_quiet_period_off_the_loop() -> None:
    calls: list[int] = []

    async def scenario() -> int:
        budget = AdmissionBudget(64 * MiB)
        trimmer = HeapTrimmer(
            budget, asyncio.get_running_loop(), quiet_s=0.05, min_interval_s=0.0, malloc_trim=calls.append
        )
        await _burst(budget, 4 * MiB)
        await _burst(budget, 4 * MiB)  # a second drain before the timer fires: still one trim
        async with asyncio.timeout(10):
            while trimmer.trims == 0:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        trimmer.close()
        return trimmer.trims

    assert asyncio.run(scenario()) == 1
    assert calls == [0]


def test_no_trim_while_another_burst_holds_the_budget_or_after_a_small_peak() -> None:
    calls: list[int] = []

    async def scenario() -> None:
        budget = AdmissionBudget(64 * MiB)
        trimmer = HeapTrimmer(
            budget, asyncio.get_running_loop(), quiet_s=0.05, min_interval_s=0.0, malloc_trim=calls.append
        )
        await _burst(budget, MiB)  # a 4 MiB peak: not worth a trim
        await _burst(budget, 4 * MiB)
        busy = [budget.try_admit(4 * MiB, "grpc") for _ in range(3)]  # the next burst is under way
        await asyncio.sleep(0.3)
        assert trimmer.trims == 0
        for admission in busy:
            admission.release()  # its own drain arms the next trim
        async with asyncio.timeout(10):
            while trimmer.trims == 0:
                await asyncio.sleep(0.01)
        trimmer.close()

    asyncio.run(scenario())
    assert calls == [0]


def test_glibc_malloc_trim_is_found_on_linux() -> None:
    trim = _glibc_malloc_trim()
    assert trim is not None  # the CI and production images run glibc
    assert trim(0) in (0, 1)
