"""A faust-streaming application with a Table, run by tests/frameworks/test_faust.py in faust's own venv.

``python faust_app.py BOOTSTRAP APP_ID DATA_DIR EXPECTED``: an agent counts the words of topic
``fwords`` into a Table (in memory, so a restarted worker rebuilds it from the changelog topic
faust creates with ``cleanup.policy=compact``). Once it has counted ``EXPECTED`` events in this
run it writes the table to ``DATA_DIR/result.json`` (atomically); the test then stops the worker
with SIGTERM, as an operator would. It logs at INFO (the test waits for faust's "Ready" before it
produces) and prints a line per event. Not a test module: it runs only under faust's interpreter.
"""

from __future__ import annotations

import json
import os
import sys

import faust


def main() -> int:
    bootstrap, app_id, data_dir, expected = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    app = faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        datadir=data_dir,
        topic_partitions=2,
        topic_replication_factor=1,
        web_enabled=False,
        broker_commit_every=10,
        # A worker that did not leave in time (SIGKILLed after the test's grace period, on a loaded
        # machine) holds the group until its session ends: 10 s, not faust's 60, keeps the next
        # worker's join within the test's deadline. Still inside the broker's bounds (6 s .. 30 min).
        broker_session_timeout=10.0,
        broker_rebalance_timeout=10.0,
    )
    words = app.topic("fwords", key_type=str, value_type=str, key_serializer="raw", value_serializer="raw")
    table = app.Table("word_counts", default=int, partitions=2)
    counted = {"events": 0}

    @app.agent(words)
    async def count(stream: faust.StreamT[str]) -> None:
        async for event in stream.events():
            word = event.value
            table[word] += 1
            counted["events"] += 1
            # One line per event in the worker's log: a failing test shows which offsets it saw.
            print(f"event {event.message.partition}@{event.message.offset} {word} n={counted['events']}", flush=True)
            if counted["events"] == expected:
                snapshot = json.dumps({k: table[k] for k in sorted(table.keys())})
                with open(os.path.join(data_dir, "result.json.tmp"), "w", encoding="utf-8") as f:
                    f.write(snapshot)
                os.replace(os.path.join(data_dir, "result.json.tmp"), os.path.join(data_dir, "result.json"))

    sys.argv = [sys.argv[0], "worker", "--loglevel", "info", "--without-web"]
    app.main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
