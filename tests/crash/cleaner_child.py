"""A broker process SIGKILLed at one step of a log clean (issue 24), run as a script.

``cleaner_child.py DATA STEP`` opens the broker on DATA (its segments were written small; it
now groups them up to 1 MiB, so the pass rewrites every sealed segment into one) and cleans
the compacted topic ``t`` once, with a SIGKILL planted at STEP (lkstream.storage.swap's
steps, each a function the script wraps):

``writing``      half-way through writing ``.seg.cleaned`` (a torn rewrite)
``written``      the rewrite is written and fsynced, not committed
``idx-swapped``  ``.idx.cleaned`` renamed ``.idx.swap``, ``.seg.cleaned`` not yet (inside the commit)
``committed``    ``.seg.swap`` exists: the commit point
``retiring``     half of the old segments renamed ``.deleted``
``retired``      every old segment renamed ``.deleted``
``installing``   the new index installed, the new segment still ``.seg.swap``
``installed``    the new segment installed, the ``.deleted`` files still there
``removed``      everything done but ``marks.meta`` (the cleaner's progress)
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lkstream import Broker
from lkstream.storage import swap
from lkstream.storage.cleaner import CleanerPolicy, clean_pass
from lkstream.storage.clock import ManualClock
from lkstream.storage.keymap import new_key_map

STEPS = (
    "writing",
    "written",
    "idx-swapped",
    "committed",
    "retiring",
    "retired",
    "installing",
    "installed",
    "removed",
)
#: The steps after which the rewrite happened (the commit point is the rename to .seg.swap).
COMMITTED = frozenset(STEPS[STEPS.index("committed") :])
START_MS = 1_700_000_000_000
NOW_MS = START_MS + 10 * 86_400_000  # every tombstone is past its delete.retention.ms


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _after(owner: Any, name: str) -> None:
    original = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        _kill()
        return result

    setattr(owner, name, wrapped)


def _plant(step: str) -> None:
    if step == "writing":
        appended = 0
        append = swap.CleanedWriter.append

        def append_then_die(self: swap.CleanedWriter, *args: Any) -> None:
            nonlocal appended
            append(self, *args)
            appended += 1
            if appended == 3:
                _kill()

        swap.CleanedWriter.append = append_then_die  # type: ignore[method-assign]
    elif step == "written":
        _after(swap.CleanedWriter, "finish")
    elif step == "idx-swapped":
        rename = os.rename

        def rename_then_die(src: str, dst: str) -> None:
            rename(src, dst)
            if dst.endswith(".idx.swap"):
                _kill()

        swap.os.rename = rename_then_die  # type: ignore[assignment]
    elif step == "retiring":
        retire = swap.retire

        def half_then_die(directory: str, bases: Any) -> None:
            bases = list(bases)
            retire(directory, bases[: max(1, len(bases) // 2)])
            _kill()

        swap.retire = half_then_die  # type: ignore[assignment]
    elif step == "installing":
        rename = os.rename

        def rename_then_die(src: str, dst: str) -> None:
            rename(src, dst)
            if src.endswith(".idx.swap"):
                _kill()

        swap.os.rename = rename_then_die  # type: ignore[assignment]
    else:
        _after(
            swap,
            {"committed": "commit", "retired": "retire", "installed": "install", "removed": "remove_retired"}[step],
        )


def main() -> None:
    data, step = sys.argv[1], sys.argv[2]
    clock = ManualClock(NOW_MS)
    broker = Broker(persist_dir=data, segment_max_bytes=1 << 20, log_cleaner_enabled=False, clock=clock)
    log = broker.partition("t", 0).log
    snapshot = log.cleaning_snapshot()
    assert len(snapshot.sealed) > 3, snapshot
    _plant(step)
    policy = CleanerPolicy(delete_retention_ms=86_400_000)
    clean_pass(snapshot, policy, new_key_map(1 << 20), clock.now_ms(), log.replace_segments)
    raise SystemExit(f"the clean finished without reaching {step}")


if __name__ == "__main__":
    main()
