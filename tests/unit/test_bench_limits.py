"""The machine's loopback limits the peer suite measures beside the disk's (benchmarks/suite/physical.py).

Each runs against a real second process over a real loopback connection; no figure is asserted
beyond its sign and shape (timings belong in benchmarks, not in tests).
"""

from __future__ import annotations

from benchmarks.suite import physical
from benchmarks.suite.core import MiB
from benchmarks.suite.run import summarize_extras


def test_loopback_bandwidth_counts_every_byte_the_other_process_sent() -> None:
    measured = physical.loopback_tcp(8 * MiB, chunk=MiB)
    assert measured["bytes"] == 8 * MiB
    assert measured["MB_per_s"] > 0


def test_loopback_round_trips_are_timed_one_at_a_time_in_microseconds() -> None:
    measured = physical.loopback_round_trip(samples=200, warmup=20)
    assert measured["samples"] == 200
    assert 0 < measured["p50_us"] <= measured["p99_us"]
    assert measured["MB_per_s"] is None  # a latency: left out of the bandwidth limits


def test_round_trips_are_summarized_apart_from_the_bandwidth_limits() -> None:
    runs = [
        {
            "run": run,
            "loopback_tcp": {"MB_per_s": 100.0 + run},
            "loopback_round_trip": {"MB_per_s": None, "p50_us": 10.0 + run, "p99_us": 20.0 + run},
        }
        for run in range(3)
    ]
    out = summarize_extras({"physical": runs, "sweep": [], "seq_vs_random": [], "seek": []})
    assert sorted(out["physical"]) == ["loopback_tcp"]
    assert out["loopback_round_trip_us"]["p50_us"]["median"] == 11.0
    assert out["loopback_round_trip_us"]["p99_us"]["runs"] == [20.0, 21.0, 22.0]
