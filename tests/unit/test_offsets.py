"""lkstream.storage.offsets: durable committed consumer offsets (journal + snapshot files)."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lkstream.errors import CorruptRecordError, DataDirLockedError, InvalidArgumentError, StorageError
from lkstream.storage.clock import ManualClock
from lkstream.storage.files import OsFile
from lkstream.storage.offset_journal import (
    JOURNAL_MAGIC,
    JOURNAL_NAME,
    RECORD_HEADER,
    JournalFollower,
    encode_record,
)
from lkstream.storage.offsets import OffsetStore

#: CRC-32C header of the golden record with metadata (docs/format.md).
RECORD_WITH_METADATA_HEADER_HEX = "0000004b15c684f3"  # length 75, CRC-32C 0x15C684F3


class CountingFile(OsFile):
    """An OsFile that counts fsyncs, can make them slow, block them, or fail them."""

    fsyncs = 0
    delay = 0.0
    gate: threading.Event | None = None
    fail = False

    def fsync(self) -> None:
        type(self).fsyncs += 1
        if self.gate is not None:
            self.gate.wait(10)
        if self.delay:
            time.sleep(self.delay)
        if self.fail:
            raise StorageError("cannot fsync (Input/output error)", path=self.path)
        super().fsync()


@pytest.fixture
def counting() -> Iterator[type[CountingFile]]:
    cls = type("Counting", (CountingFile,), {})
    yield cls


@pytest.fixture
def store(tmp_path: Path) -> Iterator[OffsetStore]:
    s = OffsetStore(str(tmp_path), clock=ManualClock(1_000))
    yield s
    s.close()


def crash(store: OffsetStore) -> None:
    """Drop the store like SIGKILL would: no compaction; written bytes stay in the page cache."""
    assert store.journal is not None
    store.journal.abandon()


def journal_path(tmp_path: Path) -> Path:
    return tmp_path / "offsets" / JOURNAL_NAME


def test_read_committed_is_none_before_any_commit(store: OffsetStore) -> None:
    assert store.read_committed("g", "t", 0) is None


def test_commit_then_read_back(store: OffsetStore) -> None:
    store.commit("g", "t", 0, 42)
    store.commit("g", "t", 1, 7)
    store.commit("other", "t", 0, 3)
    assert store.read_committed("g", "t", 0) == 42
    assert store.read_committed("g", "t", 1) == 7
    assert store.read_committed("other", "t", 0) == 3
    assert store.list_committed() == {("g", "t", 0): 42, ("g", "t", 1): 7, ("other", "t", 0): 3}


def test_a_later_commit_replaces_the_earlier(store: OffsetStore) -> None:
    store.commit("g", "t", 0, 1)
    store.commit("g", "t", 0, 2)
    assert store.read_committed("g", "t", 0) == 2


def test_commit_many_is_one_journal_record(store: OffsetStore, tmp_path: Path) -> None:
    store.commit_many("g", {("t", 0): 5, ("t", 1): 6, ("u", 0): 7})
    data = journal_path(tmp_path).read_bytes()
    assert data.startswith(JOURNAL_MAGIC)
    assert data[len(JOURNAL_MAGIC) :] == encode_record(
        1_000, [("g", "t", 0, 5, None, ""), ("g", "t", 1, 6, None, ""), ("g", "u", 0, 7, None, "")]
    )
    assert store.list_committed() == {("g", "t", 0): 5, ("g", "t", 1): 6, ("g", "u", 0): 7}


def test_commits_survive_a_new_store_on_the_same_directory(tmp_path: Path) -> None:
    OffsetStore(str(tmp_path)).commit("g", "t", 0, 99)
    assert OffsetStore(str(tmp_path)).read_committed("g", "t", 0) == 99


def test_commits_survive_a_crash_without_compaction(tmp_path: Path) -> None:
    store = OffsetStore(str(tmp_path))
    store.commit_many("g", {("t", 0): 1, ("t", 1): 2})
    store.commit("h", "t", 0, 3)
    crash(store)
    assert not [n for n in os.listdir(tmp_path / "offsets") if n.endswith(".offset")]  # journal only
    with OffsetStore(str(tmp_path)) as again:
        assert again.list_committed() == {("g", "t", 0): 1, ("g", "t", 1): 2, ("h", "t", 0): 3}


def test_close_compacts_into_the_seed_file_layout(tmp_path: Path) -> None:
    store = OffsetStore(str(tmp_path), clock=ManualClock(1_000))
    store.commit("grp", "orders", 3, 15)
    path = tmp_path / "offsets" / "grp__orders__part3.offset"
    assert store.path_for("grp", "orders", 3) == str(path)
    store.close()
    assert json.loads(path.read_bytes()) == {"offset": 15, "committed_ms": 1_000}
    assert sorted(os.listdir(tmp_path / "offsets")) == [JOURNAL_NAME, "grp__orders__part3.offset"]
    assert journal_path(tmp_path).read_bytes() == JOURNAL_MAGIC
    assert OffsetStore(str(tmp_path)).read_committed("grp", "orders", 3) == 15


def test_journal_is_compacted_once_it_passes_compact_bytes(tmp_path: Path) -> None:
    store = OffsetStore(str(tmp_path), compact_bytes=2_000)
    for i in range(200):
        store.commit(f"g{i % 7}", "t", i % 3, i)
    assert journal_path(tmp_path).stat().st_size < 2_000 + 200
    files = [n for n in os.listdir(tmp_path / "offsets") if n.endswith(".offset")]
    assert len(files) == 21
    expected = store.list_committed()
    assert expected[("g3", "t", 1)] == max(i for i in range(200) if i % 7 == 3 and i % 3 == 1)
    crash(store)
    assert OffsetStore(str(tmp_path)).list_committed() == expected


@pytest.mark.parametrize("stage", ["snapshot-written", "journal-swapped"])
def test_a_crash_inside_compaction_loses_nothing(tmp_path: Path, stage: str) -> None:
    store = OffsetStore(str(tmp_path))
    store.commit("g", "t", 0, 1)
    store.close()  # snapshot g/t/0 = 1
    store = OffsetStore(str(tmp_path))
    store.commit("g", "t", 0, 2)
    store.commit("g", "t", 1, 5)
    store.commit("h", "t", 0, 9)

    class Crash(Exception):
        pass

    def die(at: str) -> None:
        if at == stage:
            raise Crash(at)

    assert store.journal is not None
    store.journal.stage_hook = die
    with pytest.raises(Crash):
        store.compact()
    crash(store)
    with OffsetStore(str(tmp_path)) as again:
        assert again.list_committed() == {("g", "t", 0): 2, ("g", "t", 1): 5, ("h", "t", 0): 9}


def test_a_crash_inside_compaction_keeps_deletions(tmp_path: Path) -> None:
    store = OffsetStore(str(tmp_path))
    store.commit("g", "t", 0, 1)
    store.commit("h", "t", 0, 2)
    store.close()
    store = OffsetStore(str(tmp_path))
    assert store.forget_group("g") == 1
    assert store.journal is not None

    def die(at: str) -> None:
        raise RuntimeError(at)

    store.journal.stage_hook = die
    with pytest.raises(RuntimeError):
        store.compact()
    crash(store)
    assert not (tmp_path / "offsets" / "g__t__part0.offset").exists()  # snapshot written before the crash
    assert OffsetStore(str(tmp_path)).list_committed() == {("h", "t", 0): 2}


def test_many_threads_share_fsyncs(tmp_path: Path, counting: type[CountingFile]) -> None:
    counting.delay = 0.005  # a slow disk: committers pile up behind each fsync
    store = OffsetStore(str(tmp_path), file_factory=counting)
    counting.fsyncs = 0
    threads, per_thread = 8, 40
    barrier = threading.Barrier(threads)

    def work(n: int) -> None:
        barrier.wait()
        for i in range(per_thread):
            store.commit(f"g{n}", "t", i % 2, i + 1)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    commits = threads * per_thread
    assert store.journal is not None and store.journal.fsyncs == counting.fsyncs
    assert counting.fsyncs <= commits // 3, f"{counting.fsyncs} fsyncs for {commits} commits"
    crash(store)
    expected = {(f"g{n}", "t", p): per_thread - 1 + p for n in range(threads) for p in (0, 1)}
    assert OffsetStore(str(tmp_path)).list_committed() == expected


def test_submit_does_not_wait_for_the_fsync(tmp_path: Path, counting: type[CountingFile]) -> None:
    counting.gate = threading.Event()
    store = OffsetStore(str(tmp_path), file_factory=counting)
    outcome: list[BaseException | None] = []
    done = threading.Event()

    def on_durable(error: BaseException | None) -> None:
        outcome.append(error)
        done.set()

    started = time.monotonic()
    store.submit("g", {("t", 0): 8}, on_durable)
    assert time.monotonic() - started < 5  # returned while the fsync is held at the gate
    assert not done.is_set()
    assert store.read_committed("g", "t", 0) is None  # not durable yet, so not visible
    counting.gate.set()
    assert done.wait(10)
    assert outcome == [None]
    assert store.read_committed("g", "t", 0) == 8
    store.close()
    assert OffsetStore(str(tmp_path)).read_committed("g", "t", 0) == 8


def test_a_failed_fsync_fails_waiters_and_refuses_further_commits(tmp_path: Path, counting: type[CountingFile]) -> None:
    store = OffsetStore(str(tmp_path), file_factory=counting)
    store.commit("g", "t", 0, 1)
    counting.fail = True
    errors: list[BaseException | None] = []
    with pytest.raises(StorageError, match="fsync"):
        store.commit("g", "t", 0, 2)
    assert store.read_committed("g", "t", 0) == 1
    with pytest.raises(StorageError, match="fsync failed earlier"):
        store.submit("g", {("t", 0): 3}, errors.append)
    crash(store)


def test_torn_tail_is_truncated_on_open(tmp_path: Path) -> None:
    store = OffsetStore(str(tmp_path))
    store.commit("g", "t", 0, 1)
    store.commit("g", "t", 0, 2)
    crash(store)
    path = journal_path(tmp_path)
    good = path.stat().st_size
    torn = encode_record(5, [("g", "t", 0, 3, None, "")])
    with open(path, "ab") as f:
        f.write(torn[: len(torn) - 4])
    # A read-only view stops at the torn record and leaves the file alone.
    assert OffsetStore(str(tmp_path), read_only=True).read_committed("g", "t", 0) == 2
    assert path.stat().st_size == good + len(torn) - 4
    with OffsetStore(str(tmp_path)) as again:
        assert path.stat().st_size == good
        assert again.read_committed("g", "t", 0) == 2
        again.commit("g", "t", 0, 4)
    assert OffsetStore(str(tmp_path)).read_committed("g", "t", 0) == 4


def test_crc_damage_before_a_valid_record_is_corruption(tmp_path: Path) -> None:
    store = OffsetStore(str(tmp_path))
    store.commit("g", "t", 0, 1)
    store.commit("g", "t", 0, 22)
    store.commit("g", "t", 0, 3)
    crash(store)
    path = journal_path(tmp_path)
    data = bytearray(path.read_bytes())
    second = len(JOURNAL_MAGIC) + RECORD_HEADER.size + RECORD_HEADER.unpack_from(data, len(JOURNAL_MAGIC))[0]
    payload_at = second + RECORD_HEADER.size
    data[data.index(b"22", payload_at)] = ord("7")  # same length, wrong CRC
    path.write_bytes(bytes(data))
    for read_only in (False, True):
        with pytest.raises(CorruptRecordError) as info:
            OffsetStore(str(tmp_path), read_only=read_only).read_committed("g", "t", 0)
        assert info.value.path == str(path)
        assert info.value.position == second
    assert path.read_bytes() == bytes(data)  # nothing truncated


def test_a_bad_journal_header_is_corruption(tmp_path: Path) -> None:
    OffsetStore(str(tmp_path)).close()
    journal_path(tmp_path).write_bytes(b"garbage!")
    with pytest.raises(CorruptRecordError, match="offsets journal"):
        OffsetStore(str(tmp_path))


def test_read_only_view_follows_the_writer_and_its_compactions(tmp_path: Path) -> None:
    writer = OffsetStore(str(tmp_path), compact_bytes=600, clock=ManualClock(1_000))
    follower = JournalFollower(str(tmp_path / "offsets"))
    assert follower.refresh() == {}
    writer.commit("g", "t", 0, 1)
    assert follower.refresh() == {("g", "t", 0): (1, 1_000, None, "")}
    for i in range(2, 40):  # several compactions replace the journal meanwhile
        writer.commit("g", "t", i % 2, i)
        seen = {k: v for k, v in follower.refresh().items() if not isinstance(v, CorruptRecordError)}
        assert {k: v[0] for k, v in seen.items()} == writer.list_committed()
    writer.forget_group("g")
    assert follower.refresh() == {}
    follower.close()
    writer.close()


def test_read_only_store_never_writes(tmp_path: Path) -> None:
    missing = OffsetStore(str(tmp_path / "nowhere"), read_only=True)
    assert missing.list_committed() == {}
    assert not (tmp_path / "nowhere").exists()
    with pytest.raises(InvalidArgumentError, match="read-only"):
        missing.commit("g", "t", 0, 1)
    writer = OffsetStore(str(tmp_path))
    writer.commit("g", "t", 0, 5)
    crash(writer)
    before = sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in (tmp_path / "offsets").iterdir())
    assert OffsetStore(str(tmp_path), read_only=True).read_committed("g", "t", 0) == 5
    after = sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in (tmp_path / "offsets").iterdir())
    assert before == after


def test_a_store_of_another_writer_reads_but_refuses_commits(tmp_path: Path) -> None:
    OffsetStore(str(tmp_path)).commit("g", "t", 0, 1)
    # Another process holds the journal lock (an flock on offsets/ through its own descriptor).
    fd = os.open(tmp_path / "offsets", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        other = OffsetStore(str(tmp_path))
        assert other.journal is None
        assert other.read_committed("g", "t", 0) == 1
        with pytest.raises(DataDirLockedError):
            other.commit("g", "t", 0, 2)
    finally:
        os.close(fd)


def test_stores_of_one_process_share_the_writer(tmp_path: Path) -> None:
    a = OffsetStore(str(tmp_path))
    b = OffsetStore(str(tmp_path))
    r = OffsetStore(str(tmp_path), read_only=True)
    assert a.journal is b.journal is r.journal is not None
    a.commit("g", "t", 0, 1)
    assert b.read_committed("g", "t", 0) == 1 and r.read_committed("g", "t", 0) == 1
    a.close()
    b.commit("g", "t", 0, 2)  # still open: the last store closes the writer
    b.close()
    r.close()
    assert OffsetStore(str(tmp_path)).read_committed("g", "t", 0) == 2


def test_forget_topic_removes_only_that_topics_offsets(store: OffsetStore, tmp_path: Path) -> None:
    store.commit("g", "t", 0, 5)
    store.commit("g", "t", 1, 6)
    store.commit("g", "t__x", 0, 7)
    store.commit("h", "_t", 0, 8)
    assert store.forget_topic("t") == 2
    assert store.forget_topic("t") == 0
    assert store.read_committed("g", "t", 0) is None
    assert store.read_committed("g", "t__x", 0) == 7
    assert store.read_committed("h", "_t", 0) == 8
    crash(store)
    assert OffsetStore(str(tmp_path)).list_committed() == {("g", "t__x", 0): 7, ("h", "_t", 0): 8}


def test_forget_group_is_durable_and_survives_compaction(tmp_path: Path) -> None:
    store = OffsetStore(str(tmp_path))
    store.commit_many("g", {("t", 0): 1, ("u", 0): 2})
    store.commit("h", "t", 0, 3)
    store.close()  # g's offsets are now snapshot files
    store = OffsetStore(str(tmp_path))
    assert store.forget_group("g") == 2
    assert store.list_committed() == {("h", "t", 0): 3}
    crash(store)
    store = OffsetStore(str(tmp_path))
    assert store.list_committed() == {("h", "t", 0): 3}
    store.close()
    assert sorted(n for n in os.listdir(tmp_path / "offsets") if n.endswith(".offset")) == ["h__t__part0.offset"]


def test_stray_tmp_files_are_swept_by_the_owning_store(tmp_path: Path) -> None:
    OffsetStore(str(tmp_path)).commit("g", "t", 0, 1)
    stray = tmp_path / "offsets" / "g__t__part0.offset.tmp"
    stray.write_bytes(b"{half")
    again = OffsetStore(str(tmp_path), sweep_tmp=True)
    assert not stray.exists()
    assert again.read_committed("g", "t", 0) == 1


def test_a_second_store_leaves_tmp_files_of_live_commits_alone(tmp_path: Path) -> None:
    OffsetStore(str(tmp_path)).commit("g", "t", 0, 1)
    in_flight = tmp_path / "offsets" / "g__t__part0.offset.123-456.tmp"
    in_flight.write_bytes(b"{half")
    OffsetStore(str(tmp_path))
    assert in_flight.exists()


def test_group_and_topic_pairs_never_share_an_offset_file(store: OffsetStore) -> None:
    # ("g_", "x") and ("g", "_x") would both be g___x__part0 readably: the first is hashed instead.
    assert os.path.basename(store.path_for("g", "_x", 0)) == "g___x__part0.offset"
    assert os.path.basename(store.path_for("g_", "x", 0)).startswith("~")
    assert store.path_for("g", "_x", 0) != store.path_for("g_", "x", 0) != store.path_for("g", "x", 0)


#: Group ids Kafka accepts and the rule before issue 24 refused (Kafka accepts any non-empty string).
KAFKA_GROUP_IDS = ["a b", "a:b", "a/b", "../etc", "..", ".", "g@x", "a__b", "g_", "ünïcode", "x" * 250, "tab\t", "nl\n"]


@pytest.mark.parametrize("group", KAFKA_GROUP_IDS, ids=repr)
def test_kafka_group_ids_are_stored_in_hashed_files_inside_the_directory(tmp_path: Path, group: str) -> None:
    store = OffsetStore(str(tmp_path), clock=ManualClock(1_000))
    store.commit(group, "t", 0, 7)
    store.commit("plain", "t", 0, 3)
    store.close()  # compacts into snapshot files
    names = sorted(n for n in os.listdir(tmp_path / "offsets") if n.endswith(".offset"))
    hashed = [n for n in names if n.startswith("~")]
    assert names == sorted(["plain__t__part0.offset", *hashed]) and len(hashed) == 1
    assert os.path.dirname(store.path_for(group, "t", 0)) == str(tmp_path / "offsets")
    body = json.loads((tmp_path / "offsets" / hashed[0]).read_bytes())
    assert body == {"offset": 7, "committed_ms": 1_000, "group": group, "topic": "t", "partition": 0}
    with OffsetStore(str(tmp_path)) as again:
        assert again.list_committed() == {(group, "t", 0): 7, ("plain", "t", 0): 3}
        assert again.forget_group(group) == 1
    with OffsetStore(str(tmp_path)) as again:
        assert again.list_committed() == {("plain", "t", 0): 3}
    assert sorted(n for n in os.listdir(tmp_path / "offsets") if n.endswith(".offset")) == ["plain__t__part0.offset"]


def test_a_readable_name_too_long_for_the_file_system_is_hashed(tmp_path: Path) -> None:
    group, topic = "g" * 200, "t" * 249  # the seed's name would be 466 bytes: no file system takes it
    with OffsetStore(str(tmp_path)) as store:
        store.commit(group, topic, 0, 1)
    (name,) = [n for n in os.listdir(tmp_path / "offsets") if n.endswith(".offset")]
    assert name.startswith("~") and len(name) < 64
    with OffsetStore(str(tmp_path)) as again:
        assert again.read_committed(group, topic, 0) == 1


def test_a_hashed_file_whose_body_names_another_key_is_damage(tmp_path: Path) -> None:
    with OffsetStore(str(tmp_path)) as store:
        store.commit("a b", "t", 0, 1)
        store.commit("c d", "t", 0, 2)
    offsets = tmp_path / "offsets"
    first, second = sorted(n for n in os.listdir(offsets) if n.startswith("~"))
    (offsets / first).write_bytes((offsets / second).read_bytes())  # a copy under the wrong name
    with OffsetStore(str(tmp_path), read_only=True) as view:
        assert len(view.list_committed()) == 1  # the impostor is skipped, not read as the other key


def test_commit_metadata_is_stored_read_back_and_survives_compaction(tmp_path: Path) -> None:
    store = OffsetStore(str(tmp_path), clock=ManualClock(1_000))
    store.commit_many("g", {("t", 0): 5, ("t", 1): 6}, metadata={("t", 0): "worker-3 checkpoint ✓"})
    assert store.read_committed_metadata("g", "t", 0) == (5, 1_000, None, "worker-3 checkpoint ✓")
    assert store.read_committed_metadata("g", "t", 1) == (6, 1_000, None, "")
    crash(store)
    with OffsetStore(str(tmp_path)) as replayed:  # from the journal
        assert replayed.read_committed_metadata("g", "t", 0) == (5, 1_000, None, "worker-3 checkpoint ✓")
    body = json.loads((tmp_path / "offsets" / "g__t__part0.offset").read_bytes())
    assert body == {"offset": 5, "committed_ms": 1_000, "metadata": "worker-3 checkpoint ✓"}
    with OffsetStore(str(tmp_path)) as compacted:  # from the snapshot file
        assert compacted.read_committed_metadata("g", "t", 0) == (5, 1_000, None, "worker-3 checkpoint ✓")


def test_metadata_must_be_a_string(store: OffsetStore) -> None:
    with pytest.raises(InvalidArgumentError, match="metadata"):
        store.commit_many("g", {("t", 0): 1}, metadata={("t", 0): b"bytes"})  # type: ignore[dict-item]
    assert store.list_committed() == {}


@pytest.mark.parametrize("group", ["", None, 5, b"bytes", "\ud800", "x" * 32768], ids=repr)
def test_bad_group_names_are_rejected(store: OffsetStore, group: object) -> None:
    with pytest.raises(InvalidArgumentError):
        store.commit(group, "t", 0, 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        store.forget_group(group)  # type: ignore[arg-type]


@pytest.mark.parametrize("topic", ["..", ".", "a/b", "", "x" * 250, "../etc"])
def test_bad_topic_names_are_rejected(store: OffsetStore, topic: str) -> None:
    with pytest.raises(InvalidArgumentError):
        store.commit("g", topic, 0, 1)


@pytest.mark.parametrize("partition", [-1, "0", 1.0, None, True])
def test_bad_partitions_are_rejected(store: OffsetStore, partition: object) -> None:
    with pytest.raises(InvalidArgumentError):
        store.commit("g", "t", partition, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("offset", [-1, 1.5, "3", None, True])
def test_bad_offsets_are_rejected(store: OffsetStore, offset: object) -> None:
    with pytest.raises(InvalidArgumentError):
        store.commit("g", "t", 0, offset)  # type: ignore[arg-type]


@pytest.mark.parametrize("offsets", [{}, {("t", 0): 1, ("t", -1): 2}, {"t": 1}, [(("t", 0), 1)]])
def test_a_bad_commit_many_writes_nothing(store: OffsetStore, tmp_path: Path, offsets: object) -> None:
    with pytest.raises(InvalidArgumentError):
        store.commit_many("g", offsets)  # type: ignore[arg-type]
    assert journal_path(tmp_path).read_bytes() == JOURNAL_MAGIC
    assert store.list_committed() == {}


def test_nothing_is_written_for_a_rejected_commit(store: OffsetStore, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        store.commit("", "t", 0, 1)
    assert os.listdir(tmp_path / "offsets") == [JOURNAL_NAME]
    assert journal_path(tmp_path).read_bytes() == JOURNAL_MAGIC


@pytest.mark.parametrize(
    "content",
    [
        b"garbage",
        b"",
        b"{}",
        b'{"offset": "12"}',
        b'{"offset": -4}',
        b"[1, 2]",
        b'{"offset": 1.5}',
        b'{"offset": true}',
    ],
)
def test_garbage_offset_file_raises_corrupt_record(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "offsets").mkdir()
    path = tmp_path / "offsets" / "g__t__part0.offset"
    path.write_bytes(content)
    store = OffsetStore(str(tmp_path))
    with pytest.raises(CorruptRecordError) as info:
        store.read_committed("g", "t", 0)
    assert info.value.path == str(path)
    assert store.list_committed() == {}  # skipped there; verify reports it
    store.commit("g", "t", 0, 3)  # a new commit replaces the damaged one
    store.close()
    assert OffsetStore(str(tmp_path)).read_committed("g", "t", 0) == 3


def test_journal_record_golden_vector() -> None:
    """The example of docs/format.md, section "Offsets journal"."""
    record = encode_record(
        1_700_000_000_000,
        [("strategy-v1", "market.ticks", 0, 2, None, ""), ("strategy-v1", "market.ticks", 1, None, None, "")],
    )
    assert JOURNAL_MAGIC.hex() == "4c4b4f4a00000001"
    assert record[:8].hex() == "00000063b77cba69"
    assert record[8:] == (
        b'{"ms":1700000000000,"e":[["strategy-v1","market.ticks",0,2],["strategy-v1","market.ticks",1,null]]}'
    )


def test_journal_record_with_metadata_golden_vector() -> None:
    """The second example of docs/format.md, section "Offsets journal": an entry with metadata."""
    record = encode_record(1_700_000_000_000, [("strategy-v1", "market.ticks", 0, 2, None, "host-7")])
    assert record[8:] == b'{"ms":1700000000000,"e":[["strategy-v1","market.ticks",0,2,null,"host-7"]]}'
    assert record[:8].hex() == RECORD_WITH_METADATA_HEADER_HEX


def test_journals_written_before_metadata_load_and_six_element_entries_replay(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    old = encode_record(1, [("g", "t", 0, 4, None, "")]) + encode_record(2, [("g", "t", 1, 5, "ab" * 16, "")])
    new = encode_record(3, [("g", "t", 2, 6, None, "m")])
    assert b'["g","t",0,4]' in old and b'"ab' in old  # exactly the four- and five-element entries of before
    journal_path(tmp_path).write_bytes(JOURNAL_MAGIC + old + new)
    with OffsetStore(str(tmp_path), read_only=True) as view:
        assert view.read_committed_metadata("g", "t", 0) == (4, 1, None, "")
        assert view.read_committed_metadata("g", "t", 1) == (5, 2, "ab" * 16, "")
        assert view.read_committed_metadata("g", "t", 2) == (6, 3, None, "m")


def test_verify_replays_the_journal_and_reports_its_damage(tmp_path: Path) -> None:
    from lkstream.storage.verify import verify_data_dir

    (tmp_path / "topics").mkdir()
    store = OffsetStore(str(tmp_path))
    store.commit("g", "t", 0, 1)
    store.close()  # a snapshot file for g/t/0 ...
    store = OffsetStore(str(tmp_path))
    store.forget_group("g")  # ... deleted in the journal only
    store.commit("h", "gone", 0, 4)  # journal only, for a topic that does not exist
    crash(store)
    report = verify_data_dir(str(tmp_path))
    assert [(p.severity, os.path.basename(p.path)) for p in report.problems] == [("warning", JOURNAL_NAME)]
    assert "'gone'" in report.problems[0].message
    with open(journal_path(tmp_path), "ab") as f:
        f.write(encode_record(1, [("h", "gone", 0, 5, None, "")])[:-3])
    torn = verify_data_dir(str(tmp_path)).problems
    assert any(p.severity == "warning" and "torn tail" in p.message for p in torn)
    data = bytearray(journal_path(tmp_path).read_bytes())
    data[len(JOURNAL_MAGIC) + RECORD_HEADER.size + 3] ^= 0xFF  # the first record, a valid one follows
    journal_path(tmp_path).write_bytes(bytes(data))
    errors = [p for p in verify_data_dir(str(tmp_path)).problems if p.severity == "error"]
    assert len(errors) == 1 and errors[0].position == len(JOURNAL_MAGIC)


def test_hashed_offset_file_golden_vector(tmp_path: Path) -> None:
    """The second example of docs/format.md, section 9.5: metadata, and a group id the readable name cannot carry."""
    store = OffsetStore(str(tmp_path), clock=ManualClock(1_700_000_000_000))
    store.commit_many("payments team/eu", {("market.ticks", 0): 2}, metadata={("market.ticks", 0): "host-7"})
    store.close()
    path = tmp_path / "offsets" / "~6d7aa3dfb11d55ffe3b1c264d2659d0c8f852a8a.offset"
    assert store.path_for("payments team/eu", "market.ticks", 0) == str(path)
    assert path.read_bytes() == (
        b'{"offset": 2, "committed_ms": 1700000000000, "metadata": "host-7", '
        b'"group": "payments team/eu", "topic": "market.ticks", "partition": 0}\n'
    )


def test_verify_reads_hashed_offset_files_and_reports_a_damaged_one(tmp_path: Path) -> None:
    from lkstream import Broker
    from lkstream.storage.verify import verify_data_dir

    with Broker(persist_dir=str(tmp_path)) as broker:
        broker.create_topic("t", 1)
        broker.produce_many_sync("t", [(None, b"v")])
        broker.commit_offsets("a b/c", {("t", 0): 1})
        broker.commit_offsets("plain", {("t", 0): 1})
    report = verify_data_dir(str(tmp_path))
    assert report.offset_files == 2 and report.problems == []
    (hashed,) = (tmp_path / "offsets").glob("~*.offset")
    hashed.write_bytes(b"{half")
    damaged = verify_data_dir(str(tmp_path)).problems
    assert [(p.severity, Path(p.path).name) for p in damaged] == [("error", hashed.name)]
    assert "its key is unknown" in damaged[0].message


def test_backup_and_restore_keep_kafka_group_ids_and_metadata(tmp_path: Path) -> None:
    from lkstream import Broker
    from lkstream.storage.backup import backup_data_dir
    from lkstream.storage.restore import restore_backup

    with Broker(persist_dir=str(tmp_path / "data")) as broker:
        broker.create_topic("t", 1)
        broker.produce_many_sync("t", [(None, b"v")])
        broker.groups.commit_unfenced("ünï code/g", {("t", 0): 1}, metadata={("t", 0): "note"}, any_offset=True)
    backup_data_dir(str(tmp_path / "data"), str(tmp_path / "backup"))
    restore_backup(str(tmp_path / "backup"), str(tmp_path / "restored"))
    with OffsetStore(str(tmp_path / "restored"), read_only=True) as restored:
        found = restored.read_committed_metadata("ünï code/g", "t", 0)
    assert found is not None and (found.offset, found.metadata) == (1, "note")
