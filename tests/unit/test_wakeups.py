"""Waking waiters on an event loop: directly on that loop, through its self-pipe from other threads."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lkstream import Broker
from lkstream.broker.acks import Acknowledgement, InflightBytes
from lkstream.broker.wakeups import run_on_loop
from lkstream.errors import BrokerClosedError, StorageError
from lkstream.server.stop_signal import StopSignal

from .support import DEADLINE_S


class _CountingThreadsafe:
    """Counts the running loop's ``call_soon_threadsafe`` calls (each is a self-pipe write)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        loop = asyncio.get_running_loop()
        real = loop.call_soon_threadsafe
        self.calls = 0

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(loop, "call_soon_threadsafe", counted)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(persist_dir=str(tmp_path / "data"))
    yield b
    b.close()


async def test_run_on_loop_resolves_at_once_on_its_own_loop_without_the_self_pipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counting = _CountingThreadsafe(monkeypatch)
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    run_on_loop(asyncio.get_running_loop(), future.set_result, 7)
    assert future.done() and future.result() == 7
    assert counting.calls == 0


async def test_run_on_loop_from_another_thread_goes_through_call_soon_threadsafe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counting = _CountingThreadsafe(monkeypatch)
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    worker = threading.Thread(target=run_on_loop, args=(loop, future.set_result, 8))
    worker.start()
    assert await asyncio.wait_for(future, DEADLINE_S) == 8
    worker.join(DEADLINE_S)
    assert counting.calls == 1


def test_run_on_loop_skips_a_closed_loop() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    called: list[int] = []
    run_on_loop(loop, called.append, 1)  # no error: nobody waits on a closed loop
    assert called == []


async def test_an_append_on_the_waiters_loop_wakes_it_without_a_self_pipe_write(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.create_topic("t", 1)
    partition = broker.partition("t", 0)
    waiter = asyncio.ensure_future(partition.wait_for_offset(0, timeout=DEADLINE_S))
    await asyncio.sleep(0)  # the waiter registers
    counting = _CountingThreadsafe(monkeypatch)
    await broker.produce_many("t", [(None, b"v")])  # appends on this loop's thread
    assert await asyncio.wait_for(waiter, DEADLINE_S) is True
    assert counting.calls == 0
    assert partition._async_waiters == []


async def test_an_acknowledgement_already_fsynced_returns_without_a_hop_and_releases_its_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inflight = InflightBytes(1000)
    ack = Acknowledgement(inflight, 100, sync=True)
    done: concurrent.futures.Future[None] = concurrent.futures.Future()
    done.set_result(None)
    ack._futures.append(done)
    counting = _CountingThreadsafe(monkeypatch)
    await ack.wait()
    assert counting.calls == 0
    assert inflight.value == 0


async def test_an_acknowledgement_whose_fsync_failed_raises_that_error_and_releases_its_bytes() -> None:
    inflight = InflightBytes(1000)
    ack = Acknowledgement(inflight, 100, sync=True)
    failed: concurrent.futures.Future[None] = concurrent.futures.Future()
    failed.set_exception(StorageError("fsync failed"))
    ack._futures.append(failed)
    with pytest.raises(StorageError, match="fsync failed"):
        await ack.wait()
    assert inflight.value == 0


async def test_an_acknowledgement_still_waits_for_an_fsync_in_progress() -> None:
    inflight = InflightBytes(1000)
    ack = Acknowledgement(inflight, 100, sync=True)
    pending: concurrent.futures.Future[None] = concurrent.futures.Future()
    ack._futures.append(pending)
    waiting = asyncio.ensure_future(ack.wait())
    await asyncio.sleep(0.01)
    assert not waiting.done() and inflight.value == 100
    threading.Thread(target=pending.set_result, args=(None,)).start()
    await asyncio.wait_for(waiting, DEADLINE_S)
    assert inflight.value == 0


async def test_stop_signal_runs_its_listeners_when_set_and_still_wakes_event_waiters() -> None:
    signal = StopSignal()
    called: list[str] = []
    signal.listeners.add(lambda: called.append("stop"))
    waiting = asyncio.ensure_future(signal.wait())
    await asyncio.sleep(0)
    signal.set()
    assert called == ["stop"]
    await asyncio.wait_for(waiting, DEADLINE_S)
    assert signal.is_set()


async def test_an_arrival_is_none_when_the_offset_is_readable_and_forgotten_leaves_no_waiter(broker: Broker) -> None:
    broker.produce_many_sync("t", [(None, b"v")])
    partition = broker.partition("t", 0)
    assert partition.arrival(0) is None
    arrival = partition.arrival(1)
    assert arrival is not None and not arrival.done()
    partition.forget_arrival(arrival)
    assert partition._async_waiters == []
    await broker.produce_many("t", [(None, b"w")])
    assert not arrival.done()  # forgotten: the append no longer resolves it


async def test_an_arrival_fails_with_broker_closed_when_its_partition_closes(tmp_path: Path) -> None:
    broker = Broker(persist_dir=str(tmp_path / "data"))
    broker.create_topic("t", 1)
    arrival = broker.partition("t", 0).arrival(0)
    assert arrival is not None
    broker.close()
    with pytest.raises(BrokerClosedError):
        await asyncio.wait_for(arrival, DEADLINE_S)
