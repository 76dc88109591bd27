"""Issue 12, finding 1: a broker under a low RLIMIT_NOFILE opens, serves and reopens the cap's worth
of partitions.

Each partition used to hold two descriptors per segment for its whole life, so 3,330 topics of 3
partitions made the daemon fail at start (EMFILE, then a segfault). Here a child process lowers its
own soft ``RLIMIT_NOFILE`` to 64, creates ``max_partitions`` partitions, produces to every one and
exits; a second child, under the same limit, reopens the directory and reads every record back.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

LIMIT = 64
PARTITIONS = 800  # the configured cap, filled exactly: 8 topics of 100

CHILD = textwrap.dedent(
    """
    import os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    from lkstream import Broker
    from lkstream.errors import PartitionLimitError
    data, phase = sys.argv[1], sys.argv[2]
    settings = dict(persist_dir=data, max_partitions={partitions}, fsync_mode="group")
    with Broker(**settings) as broker:
        topics = [f"t{{n}}" for n in range(8)]
        if phase == "write":
            for topic in topics:
                broker.create_topic(topic, {partitions} // 8)
            try:
                broker.create_topic("one-too-many", 1)
                raise SystemExit("the cap was not enforced")
            except PartitionLimitError:
                pass
            for topic in topics:
                for pid in range({partitions} // 8):
                    broker.produce_many_sync(topic, [(None, f"{{topic}}/{{pid}}/{{i}}".encode()) for i in range(3)],
                                             partition=pid)
        else:
            for topic in topics:
                for pid in range({partitions} // 8):
                    got = [r.value for r in broker.read_from(topic, pid, 0)]
                    want = [f"{{topic}}/{{pid}}/{{i}}".encode() for i in range(3)]
                    assert got == want, (topic, pid, got)
        print("open files", broker.files.open_files, "of", broker.files.capacity,
              "descriptors", len(os.listdir("/proc/self/fd")))
    """
).format(limit=LIMIT, partitions=PARTITIONS)


def _run(data: Path, phase: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(data), phase],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, f"{phase} failed under RLIMIT_NOFILE={LIMIT}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_cap_of_partitions_starts_produces_and_restarts_under_a_low_descriptor_limit(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    print(_run(data, "write", subprocess_env))
    print(_run(data, "read", subprocess_env))


EXHAUST = textwrap.dedent(
    """
    import os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    from lkstream import Broker, TooManyOpenFilesError
    from lkstream.wire.contract import status_for
    with Broker(persist_dir=sys.argv[1]) as broker:
        held = []
        try:
            while True:  # what hundreds of idle connections do to a daemon
                held.extend(os.pipe())
        except OSError:
            pass
        try:
            broker.create_topic("t", 4)
            raise SystemExit("created a topic without a descriptor to spare")
        except TooManyOpenFilesError as exc:
            assert exc.limit == 64 and "RLIMIT_NOFILE is 64" in str(exc), exc
            assert status_for(exc).name == "RESOURCE_EXHAUSTED"
        for fd in held:
            os.close(fd)
        assert broker.list_topics() == [] and os.listdir(os.path.join(sys.argv[1], "topics")) == []
        broker.create_topic("t", 4)  # nothing was left behind: no zombie, no "already exists"
        print("ok")
    """
)


def test_running_out_of_descriptors_is_resource_exhausted_naming_the_limit(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", EXHAUST, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
