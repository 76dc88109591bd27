"""The compatibility matrix beyond librdkafka: kafka-python, aiokafka and kcat against the Kafka listener.

Each client: create a topic, produce keyed records with headers (idempotent
where the client supports it), consume them in a group and commit, restart the
member and resume without re-reading, look an offset up by timestamp, delete
the topic. kcat comes from Debian (scripts/install-system-deps.sh).
"""

from __future__ import annotations

import shutil
import subprocess
import time

from lkstream import Broker

DEADLINE_S = 30.0


# -- kafka-python ------------------------------------------------------------------------------------


def _kp_consume(bootstrap: str, topic: str, group: str, count: int) -> list[int]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=int(DEADLINE_S * 1000),
    )
    got: list[int] = []
    try:
        for message in consumer:
            got.append(int(dict(message.headers)["seq"]))
            if len(got) == count:
                break
        consumer.commit()
    finally:
        consumer.close()
    return got


def test_kafka_python_produces_consumes_resumes_and_administers(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic("kp", 2, 1)])
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, enable_idempotence=True, acks="all")
    for i in range(60):
        producer.send(
            "kp",
            key=f"k{i % 5}".encode(),
            value=f"v{i}".encode(),
            headers=[("seq", str(i).encode())],
            timestamp_ms=1_000 + i,
        )
    producer.flush(DEADLINE_S)
    assert sorted(_kp_consume(kafka_bootstrap, "kp", "kpg", 60)) == list(range(60))
    for i in range(60, 70):
        producer.send("kp", key=b"k", value=b"v", headers=[("seq", str(i).encode())], timestamp_ms=1_000 + i)
    producer.flush(DEADLINE_S)
    producer.close()
    assert sorted(_kp_consume(kafka_bootstrap, "kp", "kpg", 10)) == list(range(60, 70))
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap)
    found = consumer.offsets_for_times({TopicPartition("kp", 0): 1_000, TopicPartition("kp", 1): 10**12})
    consumer.close()
    assert found[TopicPartition("kp", 0)].offset == 0
    assert found[TopicPartition("kp", 1)] is None
    admin.delete_topics(["kp"])
    admin.close()
    assert "kp" not in kafka_broker.list_topics()


# -- aiokafka ------------------------------------------------------------------------------------------


async def _aio_consume(bootstrap: str, topic: str, group: str, count: int) -> list[int]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    got: list[int] = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for messages in batches.values():
                got += [int(dict(m.headers)["seq"]) for m in messages]
        await consumer.commit()
    finally:
        await consumer.stop()
    return got


async def test_aiokafka_produces_consumes_resumes_and_administers(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic("aio", 2, 1)])
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        for i in range(40):
            await producer.send_and_wait(
                "aio", key=f"k{i % 3}".encode(), value=b"v", headers=[("seq", str(i).encode())], timestamp_ms=5_000 + i
            )
    finally:
        await producer.stop()
    assert sorted(await _aio_consume(kafka_bootstrap, "aio", "ag", 40)) == list(range(40))
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        for i in range(40, 45):
            # Partition 0 explicitly: the keyed records above may all hash to partition 1, and the
            # lookup by time below needs records in partition 0 (keyless ones land on a random one).
            await producer.send_and_wait("aio", value=b"v", partition=0, headers=[("seq", str(i).encode())])
    finally:
        await producer.stop()
    assert sorted(await _aio_consume(kafka_bootstrap, "aio", "ag", 5)) == list(range(40, 45))
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap)
    await consumer.start()
    try:
        found = await consumer.offsets_for_times({TopicPartition("aio", 0): 0})
        assert found[TopicPartition("aio", 0)].offset == 0
    finally:
        await consumer.stop()
    await admin.delete_topics(["aio"])
    await admin.close()
    assert "aio" not in kafka_broker.list_topics()


# -- kcat ------------------------------------------------------------------------------------------------


def _kcat(*args: str, stdin: str | None = None) -> str:
    kcat = shutil.which("kcat")
    # Not a skip: the matrix must fail loudly where its tool is missing (scripts/install-system-deps.sh installs it).
    assert kcat is not None, "kcat is not installed: run scripts/install-system-deps.sh"
    done = subprocess.run([kcat, *args], input=stdin, capture_output=True, text=True, timeout=DEADLINE_S, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kcat_produces_and_consumes_in_a_group_with_headers(kafka_bootstrap: str, kafka_broker: Broker) -> None:
    kafka_broker.create_topic("kc", 1)
    lines = "".join(f"key{i}:value{i}\n" for i in range(20))
    _kcat("-b", kafka_bootstrap, "-t", "kc", "-P", "-K:", "-H", "origin=kcat", stdin=lines)
    out = _kcat("-b", kafka_bootstrap, "-t", "kc", "-C", "-e", "-f", "%k=%s %h\n")
    assert out.splitlines() == [f"key{i}=value{i} origin=kcat" for i in range(20)]
    records = kafka_broker.read_from("kc", 0, 0)
    assert [r.key for r in records][:2] == [b"key0", b"key1"]
    grouped = _kcat(
        "-b",
        kafka_bootstrap,
        "-G",
        "kcg",
        "kc",
        "-e",
        "-o",
        "beginning",
        "-f",
        "%s\n",
        "-X",
        "auto.offset.reset=earliest",
    )
    assert sorted(grouped.split()) == sorted(f"value{i}" for i in range(20))
    assert kafka_broker.groups.fetch_committed("kcg") == {("kc", 0): 20}
    listed = _kcat("-b", kafka_bootstrap, "-L", "-t", "kc")
    assert 'topic "kc" with 1 partitions' in listed
