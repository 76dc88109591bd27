"""Issue 12, finding 2: a poison batch never gets into the log, and one already there never hides
the good records before it.

Before the fix, ``produce_batch`` with a header that says 3 records over 2 (CRC recomputed) was
accepted; every decoded read across it then failed, the good records before it included, and it
survived a restart with ``lkstream verify`` reporting nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lkstream import Broker, Consumer
from lkstream.errors import CorruptRecordError, InvalidArgumentError
from lkstream.format.batch import HEADER_SIZE
from lkstream.format.codec import decode_batches
from lkstream.storage.verify import verify_data_dir

from .support import make_batch, rewrite


def _poison() -> bytearray:
    return rewrite(make_batch([(None, b"a"), (None, b"b")]), records_count=3, last_offset_delta=2)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(persist_dir=str(tmp_path / "data"))
    b.create_topic("t", 1)
    yield b
    b.close()


@pytest.mark.parametrize(
    "bad",
    [
        _poison(),
        rewrite(make_batch(2), attributes=7),
        rewrite(make_batch(2), records_count=2**31 - 1, last_offset_delta=2**31 - 2),
        rewrite(make_batch(2), records=b"\x01" * 50),
    ],
    ids=["count-3-over-2", "codec-7", "count-2**31-1", "garbage-records"],
)
def test_produce_batch_refuses_a_batch_whose_records_do_not_match_its_header(broker: Broker, bad: bytearray) -> None:
    with pytest.raises(InvalidArgumentError, match="rejected producer batch"):
        broker.produce_batch_sync("t", 0, bad)
    assert broker.partition("t", 0).high_watermark == 0


def _append_unchecked(broker: Broker, batch: bytearray) -> None:
    """What produce_batch did before the fix: only the frame is checked (the log's own append)."""
    broker.partition("t", 0).append_batch(batch)


def test_a_poison_batch_on_disk_does_not_hide_the_good_records_before_it(broker: Broker, tmp_path: Path) -> None:
    broker.produce_many_sync("t", [(None, b"good1"), (None, b"good2")])
    _append_unchecked(broker, _poison())
    broker.produce_many_sync("t", [(None, b"after")])
    assert [r.value for r in broker.read_from("t", 0, 0)] == [b"good1", b"good2"]
    with pytest.raises(CorruptRecordError, match="records_count is 3"):
        broker.read_from("t", 0, 2)
    consumer = Consumer(broker, group="g", auto_commit=False)
    consumer.assign([("t", 0)])
    assert [r.value for r in consumer.poll()] == [b"good1", b"good2"]
    with pytest.raises(CorruptRecordError):
        consumer.poll()
    consumer.seek("t", 0, 5)  # an operator skips the bad batch: the records after it read fine
    assert [r.value for r in consumer.poll()] == [b"after"]


def test_decode_batches_returns_the_records_before_a_bad_batch() -> None:
    good = make_batch([(None, b"a")])
    data = bytes(good) + bytes(rewrite(make_batch([(None, b"b")], base_offset=1), records=b"\x02" * 9))
    assert [r.value for r in decode_batches(data, "t", 0)] == [b"a"]
    with pytest.raises(CorruptRecordError):
        decode_batches(data[len(good) :], "t", 0)


def test_verify_reports_a_poison_batch_on_disk(broker: Broker) -> None:
    broker.produce_many_sync("t", [(None, b"ok")])
    _append_unchecked(broker, _poison())
    broker.close()
    report = verify_data_dir(broker.persist_dir)
    errors = [p for p in report.problems if p.severity == "error"]
    assert any("records_count is 3" in p.message for p in errors), report.problems


def test_a_compressed_bomb_on_disk_fails_cleanly_when_read(broker: Broker) -> None:
    """Written before the cap existed: a read refuses to inflate it past max_decompressed_bytes."""
    import gzip

    from .support import spec_record

    bomb = rewrite(make_batch(1), records=gzip.compress(spec_record(0, b"\x00" * (80 << 20))), attributes=1)
    broker.produce_many_sync("t", [(None, b"before")])
    _append_unchecked(broker, bomb)
    assert [r.value for r in broker.read_from("t", 0, 0)] == [b"before"]
    with pytest.raises(CorruptRecordError, match="inflate beyond"):
        broker.read_from("t", 0, 1)
    assert len(bomb) - HEADER_SIZE < 200_000


def test_a_batch_that_fails_its_crc_on_disk_does_not_hide_the_batches_before_it(tmp_path: Path) -> None:
    data = str(tmp_path / "d")
    with Broker(persist_dir=data) as b:
        b.produce_many_sync("t", [(None, b"first")])
        b.produce_many_sync("t", [(None, b"second")])
        segment = b.partition("t", 0).log.segment_paths()[0]
    with open(segment, "r+b") as f:  # after a clean close the checkpoint vouches for these bytes
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 0xFF]))
    with Broker(persist_dir=data) as b:
        assert [r.value for r in b.read_from("t", 0, 0)] == [b"first"]
        with pytest.raises(CorruptRecordError, match="CRC"):
            b.read_from("t", 0, 1)


def test_decoding_stops_at_a_bounded_number_of_output_bytes() -> None:
    """Finding 3: compressed batches inflate, so a read is bounded by decoded bytes, not fetched ones."""
    from lkstream.format.codec import Compression, encode_batch

    batches = []
    for n in range(4):
        batch = encode_batch([(None, b"\x00" * (1 << 20))], compression=Compression.GZIP, timestamp_ms=1)
        from lkstream.format.batch import stamp_base_offset

        stamp_base_offset(batch, n)
        batches.append(bytes(batch))
    data = b"".join(batches)
    assert len(data) < 20_000  # about 4 MiB once inflated
    records = decode_batches(data, "t", 0, max_bytes=(3 << 20) // 2)
    assert [r.offset for r in records] == [0, 1]  # stopped after the batch that crossed the bound
    assert len(decode_batches(data, "t", 0)) == 4
