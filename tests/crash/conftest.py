"""Fixtures of the crash tests: the replayable seed.

Every random choice in ``tests/crash`` derives from one base seed. It is random
per run unless ``LKSTREAM_CRASH_SEED`` is set; it is shown in pytest's header and
every assertion message carries it, so a failure is replayed with::

    LKSTREAM_CRASH_SEED=<base seed> .venv/bin/python -m pytest tests/crash -k <test>
"""

from __future__ import annotations

import pytest

from ._support import BASE_SEED, SEED_ENV, Seed


def pytest_report_header() -> str:
    return f"lkstream crash tests: {SEED_ENV}={BASE_SEED}"


@pytest.fixture
def crash_seed(request: pytest.FixtureRequest) -> Seed:
    """This test's seed: the base seed mixed with the test id (replays with the base seed)."""
    seed = Seed.for_test(request.node.nodeid)
    print(seed)  # shown by pytest for failing tests
    return seed
