"""The admission budget of request bytes (issue 12, finding 8): its rules, waits, resizes and drain reports."""

from __future__ import annotations

import asyncio
import threading

import pytest

from lkstream.broker.admission import (
    DRAIN_REPORT_BYTES,
    SMALL_REQUEST_BYTES,
    AdmissionBudget,
    SizeEstimate,
    default_reserve,
)
from lkstream.errors import BackpressureError, OverloadedError

MiB = 1024 * 1024


def test_requests_are_admitted_while_they_fit_and_refused_beyond_with_retry_advice() -> None:
    budget = AdmissionBudget(8 * MiB, reserve_bytes=MiB)
    first = budget.try_admit(4 * MiB, "grpc")
    second = budget.try_admit(3 * MiB, "grpc")  # 7 MiB: the data ceiling (limit - reserve)
    with pytest.raises(OverloadedError) as info:
        budget.try_admit(MiB, "http")
    error = info.value
    assert isinstance(error, BackpressureError) and error.retriable
    assert (error.admitted_bytes, error.size, error.limit) == (7 * MiB, MiB, 8 * MiB)
    assert error.retry_after_ms == budget.retry_after_ms > 0
    assert "max_admitted_bytes=8388608" in str(error) and "retry in" in str(error)
    assert budget.refused == {"http": 1}
    first.release()
    second.release()
    assert budget.held == 0 and budget.high_water == 7 * MiB


def test_a_lone_request_larger_than_the_budget_is_admitted() -> None:
    budget = AdmissionBudget(MiB)
    with budget.try_admit(5 * MiB, "kafka"):
        assert budget.held == 5 * MiB
        with pytest.raises(OverloadedError):
            budget.try_admit(1, "kafka")
    assert budget.held == 0


def test_small_requests_keep_a_reserve_that_data_cannot_take() -> None:
    budget = AdmissionBudget(8 * MiB, reserve_bytes=2 * MiB)
    data = budget.try_admit(6 * MiB, "grpc")
    with pytest.raises(OverloadedError):
        budget.try_admit(SMALL_REQUEST_BYTES + 1, "grpc")  # data: only up to limit - reserve
    heartbeats = [budget.try_admit(SMALL_REQUEST_BYTES, "grpc") for _ in range(32)]  # 2 MiB of small ones
    assert budget.held == 8 * MiB
    with pytest.raises(OverloadedError):
        budget.try_admit(1, "grpc")
    for admission in [data, *heartbeats]:
        admission.release()
    assert budget.held == 0


def test_release_is_once_only_and_resize_corrects_a_guess() -> None:
    budget = AdmissionBudget(8 * MiB)
    admission = budget.try_admit(MiB, "grpc")
    admission.resize(3 * MiB)  # the request was larger than guessed: held anyway, it is in memory
    assert budget.held == 3 * MiB
    admission.resize(MiB // 2)
    assert budget.held == MiB // 2
    admission.release()
    admission.release()
    assert budget.held == 0


@pytest.mark.parametrize("limit", [64 * 1024, MiB, 8 * MiB, 64 * MiB, 1024 * MiB])
def test_the_reserve_is_an_eighth_at_least_one_mib_and_at_most_half(limit: int) -> None:
    reserve = default_reserve(limit)
    assert reserve <= limit // 2
    assert reserve == limit // 2 or reserve >= MiB
    assert reserve >= limit // 8


def test_a_waiting_request_is_admitted_when_another_releases_its_bytes() -> None:
    async def scenario() -> tuple[int, float]:
        budget = AdmissionBudget(4 * MiB, reserve_bytes=MiB)
        holder = budget.try_admit(3 * MiB, "http")
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, holder.release)
        started = loop.time()
        async with asyncio.timeout(10):
            admission = await budget.admit(2 * MiB, "kafka", timeout_s=10.0)
        waited = loop.time() - started
        held = budget.held
        admission.release()
        return held, waited

    held, waited = asyncio.run(scenario())
    assert held == 2 * MiB
    assert waited >= 0.04


def test_a_release_from_another_thread_wakes_a_waiter() -> None:
    async def scenario() -> int:
        budget = AdmissionBudget(4 * MiB, reserve_bytes=MiB)
        holder = budget.try_admit(3 * MiB, "grpc")
        threading.Timer(0.05, holder.release).start()
        admission = await budget.admit(2 * MiB, "kafka", timeout_s=10.0)
        admission.release()
        return budget.held

    assert asyncio.run(scenario()) == 0


def test_a_wait_that_times_out_is_refused_and_leaves_no_waiter_behind() -> None:
    async def scenario() -> AdmissionBudget:
        budget = AdmissionBudget(4 * MiB, reserve_bytes=MiB)
        budget.try_admit(3 * MiB, "grpc")  # never released
        with pytest.raises(OverloadedError):
            await budget.admit(2 * MiB, "kafka", timeout_s=0.05)
        return budget

    budget = asyncio.run(scenario())
    assert budget.refused == {"kafka": 1}
    assert budget._waiters == []


def test_a_drain_after_a_sizeable_peak_is_reported_once_with_the_peak() -> None:
    budget = AdmissionBudget(64 * MiB)
    peaks: list[int] = []
    budget.on_drained.append(peaks.append)
    small = budget.try_admit(MiB, "grpc")
    small.release()
    assert peaks == []  # below DRAIN_REPORT_BYTES: nothing worth giving back
    held = [budget.try_admit(4 * MiB, "grpc") for _ in range(3)]
    for admission in held[:-1]:
        admission.release()
    assert peaks == []  # not drained yet
    held[-1].release()
    assert peaks == [12 * MiB] and 12 * MiB >= DRAIN_REPORT_BYTES


def test_the_size_estimate_jumps_up_and_creeps_down() -> None:
    estimate = SizeEstimate(initial=MiB, floor=4096)
    estimate.observe(4 * MiB)
    assert estimate.value == 4 * MiB
    for _ in range(200):
        estimate.observe(100)
    assert estimate.value == 4096
    estimate.observe(10_000)
    assert estimate.value == 10_000


def test_admit_now_takes_what_fits_and_returns_none_without_counting_a_refusal() -> None:
    budget = AdmissionBudget(8 * MiB, reserve_bytes=MiB)
    first = budget.admit_now(7 * MiB)
    assert first is not None and budget.held == 7 * MiB
    assert budget.admit_now(MiB) is None  # beyond the data ceiling: the caller waits (admit) or refuses
    assert budget.refused == {} and budget.held == 7 * MiB
    first.release()
    assert budget.held == 0
