"""The Java kafka-clients 3.9 leg of the compatibility matrix (the client Spark's Kafka connector uses).

The program is ``java/KafkaMatrix.java``, run as a source file (no build step; the JDK comes from
scripts/install-system-deps.sh, the jars from the PyPI wheel ``shigawire-apache-flink-libraries`` of
the ``dev`` extra): create a topic, produce keyed records with headers (idempotent), consume in a
group and commit, restart the member and resume without re-reading, look an offset up by
timestamp, delete the topic.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import os
import shutil
import subprocess
import time
from pathlib import Path

from lkstream import Broker

PROGRAM = Path(__file__).parent / "java" / "KafkaMatrix.java"
JARS = ("kafka-clients.jar", "lz4-java.jar", "snappy-java.jar", "zstd-jni.jar", "slf4j-api.jar")
DEADLINE_S = 180.0  # the JVM compiles the program in memory first: seconds on a loaded machine


def classpath() -> str:
    spec = importlib.util.find_spec("pyflink")
    # Not a skip: the matrix must fail loudly where its client is missing.
    assert spec is not None and spec.submodule_search_locations, (
        "the Java kafka-clients jar is missing: pip install -e '.[dev]' (shigawire-apache-flink-libraries)"
    )
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return os.pathsep.join(str(lib / jar) for jar in JARS)


def run_matrix(bootstrap: str, *group_protocol: str) -> dict[str, str]:
    java = shutil.which("java")
    assert java is not None, "java is not installed: run scripts/install-system-deps.sh"
    done = subprocess.run(
        [java, "-cp", classpath(), str(PROGRAM), bootstrap, "javat", "javag", *group_protocol],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    consumed = [line.split("=", 1)[1] for line in done.stdout.splitlines() if line.startswith("CONSUMED")]
    assert consumed == [",".join(map(str, range(50))), ",".join(map(str, range(50, 60)))]
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if line[:1].isupper() and " " in line)


def test_java_kafka_clients_produce_consume_resume_and_administer(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    steps = run_matrix(kafka_bootstrap)
    assert steps["CREATED"] == "topic=javat"
    assert steps["BY_TIME"] == "offset=0"
    assert steps["DELETED"] == "topic=javat"
    assert "javat" not in kafka_broker.list_topics()


def test_java_kafka_clients_with_the_kip848_consumer_protocol(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    seen: set[str] = set()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_matrix, kafka_bootstrap, "consumer")
        while not running.done():  # which coordinator holds the group while the members live
            if kafka_broker.groups.has_members("javag"):
                seen.add("lkstream")
            if kafka_broker.classic_groups.has_members("javag"):
                seen.add("classic")
            time.sleep(0.01)
        running.result()
    # The group lived in LKSTREAM's own coordinator (ConsumerGroupHeartbeat), not the classic one.
    assert seen == {"lkstream"}
    # Forgotten with its last member, and its offsets with the topic the matrix deletes at the end.
    assert kafka_broker.describe_group("javag").state.value == "Dead"
