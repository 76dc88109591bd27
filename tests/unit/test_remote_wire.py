"""``produce_request`` writes exactly the bytes protobuf's ``SerializeToString`` writes (one copy of the batch)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lkstream.client.remote.wire import produce_request
from lkstream.errors import InvalidArgumentError
from lkstream.wire._proto import messaging_pb2 as pb


@settings(derandomize=True, max_examples=300)
@given(
    topic=st.text(st.characters(exclude_categories=("Cs",)), max_size=300),
    partition=st.none() | st.integers(0, 2**32 - 1),
    batch=st.binary(max_size=3000),
)
@example(topic="", partition=None, batch=b"")
@example(topic="t", partition=0, batch=b"")
@example(topic="t" * 128, partition=2**32 - 1, batch=b"\x00" * 16_384)
def test_produce_request_is_the_messages_own_wire_form(topic: str, partition: int | None, batch: bytes) -> None:
    message = pb.ProduceRequest(topic=topic, partition=partition, record_batch=batch)
    expected = message.SerializeToString()
    assert produce_request(topic, partition, bytearray(batch)) == expected
    assert produce_request(topic, partition, batch) == expected
    assert pb.ProduceRequest.FromString(produce_request(topic, partition, batch)) == message


@pytest.mark.parametrize("partition", [-1, 2**32])
def test_produce_request_rejects_a_partition_out_of_uint32_range(partition: int) -> None:
    with pytest.raises(InvalidArgumentError, match="partition"):
        produce_request("t", partition, b"x")


def test_the_clients_default_fetch_size_is_the_embedded_brokers() -> None:
    from lkstream.broker.partition import DEFAULT_FETCH_BYTES as BROKER_DEFAULT
    from lkstream.client.remote.calls import DEFAULT_FETCH_BYTES

    assert DEFAULT_FETCH_BYTES == BROKER_DEFAULT


def test_importing_the_remote_client_does_not_import_the_embedded_broker() -> None:
    # A fresh interpreter: this test process has imported the broker already.
    probe = "import sys, lkstream.client.remote; print(sorted(m for m in sys.modules if m in HEAVY))"
    heavy = "HEAVY = {'lkstream.broker.broker', 'lkstream.broker.partition', 'lkstream.broker.acks', 'lkstream.config'}"
    done = subprocess.run([sys.executable, "-c", f"{heavy}\n{probe}"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
