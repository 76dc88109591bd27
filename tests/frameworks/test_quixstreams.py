"""quixstreams (issue 24): a stateful StreamingDataFrame counts words; stopped, its local state wiped,
restarted, it restores the counts from its changelog topic and goes on exactly.

quixstreams creates that changelog with ``cleanup.policy=compact`` (refused before issue 24:
INVALID_CONFIG "unsupported topic config 'cleanup.policy'"), so the first run shows the topic
configs working, and the second the restore reading the changelog back. A third run restores from
a changelog the daemon's cleaner compacted first (most of its records gone, offsets with gaps).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from tests.frameworks.support import (
    alter_topic_configs,
    count_records,
    create_topic,
    produce_words,
    run,
    topic_configs,
)
from tests.integration.conftest import DaemonFactory

APP = Path(__file__).parent / "quix_app.py"
#: A compacted changelog keeps each state key's latest record: three words, a little slack.
CLEANED_AT_MOST = 6
ROUNDS = 4


def test_stateful_counts_survive_a_restart_from_the_changelog(
    framework_python: Callable[[str], Path], bootstrap: str, tmp_path: Path
) -> None:
    python = framework_python("quixstreams")
    state = tmp_path / "state"
    create_topic(bootstrap, "words")
    produce_words(bootstrap, "words", 300)
    first = run(python, APP, bootstrap, "counter", str(state), "300")
    assert first == {"apple": 100, "fig": 100, "pear": 100}
    changelogs = {name: c for name, c in topic_configs(bootstrap).items() if name.startswith("changelog__counter")}
    assert changelogs and all(c.get("cleanup.policy") == "compact" for c in changelogs.values()), changelogs

    shutil.rmtree(state)  # a new machine: the state must come back from the changelog
    produce_words(bootstrap, "words", 150)
    second = run(python, APP, bootstrap, "counter", str(state), "150")
    assert second == {"apple": 150, "fig": 150, "pear": 150}


def test_counts_come_back_from_a_changelog_the_cleaner_compacted(
    framework_python: Callable[[str], Path], start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    python = framework_python("quixstreams")
    daemon = start_daemon(partitions=2, log_cleaner_backoff_ms=100, retention_check_interval_ms=100)
    bootstrap = daemon.kafka_address
    state = tmp_path / "state"
    create_topic(bootstrap, "words")
    # quixstreams writes a key's state to its changelog once per commit: several runs write each
    # word's count several times, so the changelog holds records a clean removes.
    for run_number in range(1, ROUNDS + 1):
        produce_words(bootstrap, "words", 30)
        counts = run(python, APP, bootstrap, "counter", str(state), "30")
        assert counts == dict.fromkeys(("apple", "fig", "pear"), 10 * run_number)
    changelogs = [name for name in topic_configs(bootstrap) if name.startswith("changelog__counter")]
    assert changelogs
    written = {name: count_records(bootstrap, name) for name in changelogs}
    assert sum(written.values()) >= 3 * ROUNDS > CLEANED_AT_MOST, written
    for name in changelogs:  # seal the quiet tails: the cleaner then compacts them on its own
        alter_topic_configs(bootstrap, name, {"segment.ms": "200"})
    left, deadline = written, time.monotonic() + 60
    while sum(left.values()) > CLEANED_AT_MOST and time.monotonic() < deadline:
        time.sleep(0.5)
        left = {name: count_records(bootstrap, name) for name in changelogs}
    assert sum(left.values()) <= CLEANED_AT_MOST, f"the cleaner left {left} of {written}"

    shutil.rmtree(state)  # a new machine: the state comes back from the compacted changelog
    produce_words(bootstrap, "words", 150)
    expected = dict.fromkeys(("apple", "fig", "pear"), 10 * ROUNDS + 50)
    assert run(python, APP, bootstrap, "counter", str(state), "150") == expected
