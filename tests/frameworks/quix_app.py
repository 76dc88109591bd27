"""A quixstreams application with state, run by tests/frameworks/test_quixstreams.py in quixstreams' own venv.

``python quix_app.py BOOTSTRAP GROUP STATE_DIR EXPECTED``: counts the words of topic ``words``
per word (a stateful StreamingDataFrame: RocksDB state with a changelog topic the framework
creates with ``cleanup.policy=compact``), writes ``{"word", "count"}`` to ``counts``, and stops
once it consumed ``EXPECTED`` messages with no more arriving for a few seconds. Prints the final
state it saw as one JSON line. Not a test module: it runs only under quixstreams' interpreter.
"""

from __future__ import annotations

import json
import sys

from quixstreams import Application, State


def main() -> int:
    bootstrap, group, state_dir, expected = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        state_dir=state_dir,
        processing_guarantee="at-least-once",
        commit_interval=0.5,
        loglevel="WARNING",
    )
    words = app.topic("words", key_deserializer="str", value_deserializer="str")
    counts = app.topic("counts", key_serializer="str", value_serializer="json")
    seen: dict[str, int] = {}

    def count(value: str, state: State) -> dict[str, object]:
        total = int(state.get("count", 0)) + 1
        state.set("count", total)
        seen[value] = total
        return {"word": value, "count": total}

    sdf = app.dataframe(words).apply(count, stateful=True)
    sdf.to_topic(counts)
    app.run(count=expected, timeout=20.0, collect=False)
    print(json.dumps(seen, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
