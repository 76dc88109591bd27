"""A broker process SIGKILLed at one step of a topic delete (issue 12, finding 6), run as a script.

``delete_topic_child.py DATA STEP`` opens the broker on DATA, makes sure topic ``t`` holds 10
records and group ``g`` committed 10 of them, then deletes ``t`` with a SIGKILL planted at STEP:

``before-rename``  just before the topic directory is renamed into ``trash/`` (the commit point)
``after-rename``   just after it: the topic is gone, its offsets are not forgotten yet
``before-forget``  the partitions are closed, the offsets are about to be forgotten
``after-forget``   the offsets are forgotten, the trashed directory is still there
``after-empty``    everything is done but the broker did not close

The steps are reached by wrapping the functions the delete calls, so the script kills the
broker exactly where a power cut or an OOM kill could.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lkstream import Broker
from lkstream.storage.offsets import OffsetStore
from lkstream.storage.topics import TopicStore

STEPS = ("before-rename", "after-rename", "before-forget", "after-forget", "after-empty")


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _wrap(owner: Any, name: str, *, before: bool) -> None:
    original: Callable[..., Any] = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if before:
            _kill()
        result = original(*args, **kwargs)
        if not before:
            _kill()
        return result

    setattr(owner, name, wrapped)


def main() -> None:
    data, step = sys.argv[1], sys.argv[2]
    broker = Broker(persist_dir=data, partitions=1)
    if "t" not in broker.list_topics():
        broker.create_topic("t", 1)
    if broker.partition("t", 0).high_watermark < 10:
        broker.produce_many_sync("t", [(None, f"old-{n}".encode()) for n in range(10)])
    broker.commit_offsets("g", {("t", 0): 10})
    points = {
        "before-rename": (TopicStore, "move_to_trash", True),
        "after-rename": (TopicStore, "move_to_trash", False),
        "before-forget": (OffsetStore, "forget_topic", True),
        "after-forget": (OffsetStore, "forget_topic", False),
    }
    if step == "after-empty":  # the trash thread empties behind the delete: wait for it, then die
        broker.delete_topic("t")
        broker.settle_trash()
        _kill()
    owner, name, before = points[step]
    _wrap(owner, name, before=before)
    broker.delete_topic("t")
    raise SystemExit(f"the delete finished without reaching {step}")


if __name__ == "__main__":
    main()
