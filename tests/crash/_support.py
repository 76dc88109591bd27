"""Helpers shared by the crash tests: seeds, the producer child, and log verification."""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lkstream import Broker
from lkstream.format.batch import check_batch, read_length_prefix
from lkstream.format.codec import Record, decode_batches
from lkstream.storage.segment import SEGMENT_SUFFIX, parse_segment_name

SEED_ENV = "LKSTREAM_CRASH_SEED"
BASE_SEED = int(os.environ[SEED_ENV]) if os.environ.get(SEED_ENV) else random.SystemRandom().randrange(2**32)
CHILD_SCRIPT = str(Path(__file__).with_name("producer_child.py"))
PYTHON = sys.executable


@dataclass(frozen=True)
class Seed:
    """A seed that names itself in assertion messages, with the base seed that replays it."""

    value: int

    @classmethod
    def for_test(cls, name: str) -> Seed:
        return cls(random.Random(f"{BASE_SEED}:{name}").randrange(2**32))

    def sub(self, *salt: object) -> Seed:
        """A derived seed for one iteration or one component."""
        return Seed(random.Random(f"{self.value}:{salt}").randrange(2**32))

    def rng(self) -> random.Random:
        return random.Random(self.value)

    def __str__(self) -> str:
        return f"[seed {self.value}; replay with {SEED_ENV}={BASE_SEED}]"


# -- the producer child -----------------------------------------------------------------------


@dataclass(frozen=True)
class Ack:
    partition: int
    offset: int
    n: int


class ChildProducer:
    """``producer_child.py`` in a subprocess, its stdout read by a thread into a queue.

    Reads have deadlines (``queue.get(timeout=...)``), never sleep-and-poll.
    Always use as a context manager: the process is SIGKILLed and reaped on exit.
    """

    def __init__(self, args: list[str], env: dict[str, str], stderr_path: Path) -> None:
        self._stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")  # noqa: SIM115 (closed in kill())
        self.proc = subprocess.Popen(
            [PYTHON, CHILD_SCRIPT, *args], stdout=subprocess.PIPE, stderr=self._stderr, env=env
        )
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._pump = threading.Thread(target=self._read_stdout, daemon=True)
        self._pump.start()
        self.acks: list[Ack] = []

    def __enter__(self) -> ChildProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            self._lines.put(line)
        self._lines.put(None)

    def stderr(self) -> str:
        self._stderr.flush()
        return self._stderr_path.read_text(errors="replace")[-3000:]

    def _take(self, line: bytes) -> str:
        # A line without its newline was cut by the kill; it was never fully acknowledged.
        if not line.endswith(b"\n"):
            return ""
        text = line.decode()
        if text.startswith("A "):
            _, p, o, n = text.split()
            self.acks.append(Ack(int(p), int(o), int(n)))
        return text

    def next_line(self, deadline: float) -> str | None:
        """The next complete stdout line; None at EOF. Fails the test past ``deadline``."""
        remaining = deadline - time.monotonic()
        try:
            line = self._lines.get(timeout=max(0.0, remaining))
        except queue.Empty:
            raise AssertionError(f"child produced no output before the deadline; stderr:\n{self.stderr()}") from None
        if line is None:
            self._lines.put(None)  # keep EOF sticky
            return None
        return self._take(line)

    def wait_ready(self, deadline: float) -> None:
        line = self.next_line(deadline)
        assert line == "READY\n", f"child did not start (got {line!r}); stderr:\n{self.stderr()}"

    def read_acks(self, count: int, deadline: float) -> None:
        """Read until ``count`` acknowledgements arrived (or EOF, which is a failure unless expected)."""
        while len(self.acks) < count:
            if self.next_line(deadline) is None:
                raise AssertionError(f"child exited early (rc={self.proc.poll()}); stderr:\n{self.stderr()}")

    def read_to_eof(self, deadline: float) -> None:
        while self.next_line(deadline) is not None:
            pass

    def kill(self) -> None:
        """SIGKILL (if still running), reap, and collect every line written before death."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        try:
            self.proc.wait(timeout=30)
        finally:
            self._pump.join(timeout=30)
            while True:
                try:
                    line = self._lines.get_nowait()
                except queue.Empty:
                    break
                if line is None:
                    self._lines.put(None)
                    break
                self._take(line)
            self._stderr.close()


def child_args(
    data_dir: str,
    mode: str,
    run_seed: int,
    seed: int,
    start: int,
    *,
    segment_max_bytes: int = 64 << 20,
    die_at: str = "",
    die_on_roll: int = 1,
    partitions: int = 2,
    max_batch: int = 8,
) -> list[str]:
    args = [
        "--dir",
        data_dir,
        "--mode",
        mode,
        "--run-seed",
        str(run_seed),
        "--seed",
        str(seed),
        "--start",
        str(start),
        "--partitions",
        str(partitions),
        "--segment-max-bytes",
        str(segment_max_bytes),
        "--max-batch",
        str(max_batch),
    ]
    if die_at:
        args += ["--die-at", die_at, "--die-on-roll", str(die_on_roll)]
    return args


# -- reading a log back ------------------------------------------------------------------------


def read_partition(
    broker: Broker, topic: str, partition: int, context: str = "", max_bytes: int = 64 * 1024
) -> list[Record]:
    """Every record of one partition, from the log start to the high watermark, decoded.

    Decoding everything is the point: a torn or corrupt batch must raise, not
    be skipped. Raw reads may start with a batch that begins before the
    requested offset; such records are dropped, as consumers drop them.
    """
    part = broker.partition(topic, partition)
    offset, high = part.log_start_offset, part.high_watermark
    records: list[Record] = []
    while offset < high:
        result = broker.fetch(topic, partition, offset, max_bytes)
        assert result.data, f"{topic}[{partition}]: empty fetch at {offset} below the high watermark {high} {context}"
        batch = decode_batches(result.data, topic, partition, offset)
        assert batch, f"{topic}[{partition}]: fetch at {offset} returned no whole record {context}"
        records.extend(batch)
        offset = batch[-1].offset + 1
    return records


def check_segment_files(partition_dir: str, context: str) -> list[tuple[str, int, int]]:
    """Validate every batch of every ``.seg`` file byte for byte, and offset continuity.

    Returns ``(file, first offset, next offset)`` per segment. After recovery
    nothing invalid may be left on disk: not a torn tail, not a zero page.
    """
    names = sorted(n for n in os.listdir(partition_dir) if (p := parse_segment_name(n)) and p[1] == SEGMENT_SUFFIX)
    spans = []
    expected: int | None = None
    for name in names:
        base = parse_segment_name(name)[0]  # type: ignore[index]
        data = Path(partition_dir, name).read_bytes()
        if expected is not None:
            assert base == expected, f"{name}: base offset {base} does not continue at {expected} {context}"
        pos, next_offset = 0, base
        while pos < len(data):
            header = check_batch(data, pos)  # raises CorruptRecordError on any bad byte
            assert header.base_offset == next_offset, (
                f"{name} at byte {pos}: base offset {header.base_offset}, expected {next_offset} {context}"
            )
            next_offset = header.next_offset
            _, size = read_length_prefix(data, pos)
            pos += size
        spans.append((name, base, next_offset))
        expected = next_offset
    return spans


@dataclass
class LogModel:
    """What the tests know about a topic: acknowledged ``(partition, offset) -> n``."""

    acked: dict[tuple[int, int], int] = field(default_factory=dict)
    max_n: int = -1

    def add(self, acks: list[Ack]) -> None:
        for ack in acks:
            previous = self.acked.setdefault((ack.partition, ack.offset), ack.n)
            assert previous == ack.n, f"offset {ack} acknowledged twice with different records"
            self.max_n = max(self.max_n, ack.n)
