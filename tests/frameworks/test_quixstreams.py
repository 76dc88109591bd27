"""quixstreams (issue 24): a stateful StreamingDataFrame counts words; stopped, its local state wiped,
restarted, it restores the counts from its changelog topic and goes on exactly.

quixstreams creates that changelog with ``cleanup.policy=compact`` (refused before issue 24:
INVALID_CONFIG "unsupported topic config 'cleanup.policy'"), so the first run shows the topic
configs working, and the second the restore reading the changelog back.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from tests.frameworks.support import create_topic, produce_words, run, topic_configs

APP = Path(__file__).parent / "quix_app.py"


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
