"""Issue 12, finding 6: a topic delete is crash-atomic with the group offsets.

A SIGKILL during a topic delete (after the move to the trash, before the offsets were forgotten)
let a topic created again under the same name inherit the old committed offsets: a group then
silently skipped its first records (4 of 4 tries). Here a broker process is SIGKILLed at every
step of a delete (``delete_topic_child.py``), each step repeated; after each kill the test opens
the directory and checks one of the two outcomes a crash may leave:

* killed before the commit point (the rename into ``trash/``): the topic is whole, with its 10
  records and the group's offset 10;
* killed after it: the topic is gone, and once it is created again, the group has no committed
  offset for it and a consumer of the group reads the new topic from its first record.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lkstream import Broker, Consumer

from .delete_topic_child import STEPS

CHILD = str(Path(__file__).with_name("delete_topic_child.py"))
ROUNDS = 2


def _kill_at(data: Path, step: str, env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, CHILD, str(data), step], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == -signal.SIGKILL, f"{step}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("step", STEPS)
def test_a_delete_killed_at_any_step_never_hands_old_offsets_to_a_new_topic(
    step: str, tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    for round_ in range(ROUNDS):
        _kill_at(data, step, subprocess_env)
        with Broker(persist_dir=str(data), partitions=1) as broker:
            if step == "before-rename":
                assert broker.list_topics() == ["t"], f"round {round_}: the delete did not happen"
                assert broker.groups.fetch_committed("g") == {("t", 0): 10}
                assert [r.value for r in broker.read_from("t", 0, 0)][:2] == [b"old-0", b"old-1"]
                continue
            assert broker.list_topics() == [], f"round {round_}: the topic came back after its delete"
            assert broker.groups.fetch_committed("g") == {}
            broker.create_topic("t", 1)
            broker.produce_many_sync("t", [(None, b"new-0"), (None, b"new-1"), (None, b"new-2")])
            assert broker.groups.fetch_committed("g") == {}, f"round {round_}: the new topic inherited offsets"
            consumer = Consumer(broker, group="g", auto_commit=False)
            consumer.subscribe("t")
            assert [r.value for r in consumer.poll(timeout=5)] == [b"new-0", b"new-1", b"new-2"]
            consumer.close()
            broker.delete_topic("t")  # the next round starts from an empty directory again
