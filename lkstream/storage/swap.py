"""Replacing sealed segments by a rewritten one, so that a crash leaves the old or the new, never a mix.

The cleaner (:mod:`lkstream.storage.cleaner`) rewrites a group of adjacent sealed
segments ``[b0, b1, ..., bk]`` (offsets ``b0`` up to the next segment's base ``N``) into
one segment named ``b0``. Kafka's steps (its ``LogCleaner`` / ``replaceSegments``),
each a function here so the crash tests can stop the process between any two:

1. :class:`CleanedWriter` -- ``{b0}.seg.cleaned`` and ``{b0}.idx.cleaned`` are written and
   fsynced, then the directory. Nothing refers to them yet.
2. :func:`commit` -- ``.idx.cleaned`` is renamed ``.idx.swap``, then ``.seg.cleaned``
   ``.seg.swap``, and the directory is fsynced. **The commit point is the rename to
   ``{b0}.seg.swap``**: from then on the rewrite happens, at the latest at the next open.
3. :func:`retire` -- every old segment's ``.seg`` and ``.idx`` are renamed ``.deleted``.
4. :func:`install` -- ``.idx.swap`` is renamed ``.idx``, then ``.seg.swap`` ``.seg``;
   the directory is fsynced. The log now reads the new segment.
5. :func:`remove_retired` -- the ``.deleted`` files are removed.

The log holds its lock from step 2 to step 4 (a few renames and two directory fsyncs),
never while the rewrite copies bytes (step 1), so appends and reads of the partition
wait at most for the renames, and other partitions never wait.

Recovery (:func:`recover_swaps`, run when a partition opens, before anything lists its
segments) gives every crash point one outcome:

* ``*.cleaned`` files are removed: a rewrite that had not committed did not happen;
* an ``{b}.idx.swap`` without its ``{b}.seg.swap`` is removed (killed inside step 2);
* for every ``{b}.seg.swap`` the rewrite finishes: its end offset ``E`` comes from its
  last batch; every ``.seg`` with a base in ``[b, E)`` is old and is removed with its
  index; the ``.idx.swap``, if there, becomes ``{b}.idx`` (an ``{b}.idx`` without a
  ``.idx.swap`` is the new one already installed, unless the old ``{b}.seg`` is still
  there, in which case it is old too and goes); the ``.seg.swap`` becomes ``{b}.seg``;
* ``*.deleted`` files are removed.

A missing index is rebuilt from its segment on first use, as after any crash; a
rewritten segment is fsynced whole before the commit point, so it is trusted like
any sealed segment.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from lkstream.errors import invariant, map_os_errors
from lkstream.format.batch import HEADER_SIZE, LOG_OVERHEAD, read_length_prefix
from lkstream.storage.files import fsync_dir
from lkstream.storage.index import ENTRY
from lkstream.storage.segment import INDEX_SUFFIX, SEGMENT_SUFFIX, format_segment_name, parse_segment_name

log = logging.getLogger("lkstream.storage")

CLEANED: Final = ".cleaned"
SWAP: Final = ".swap"
DELETED: Final = ".deleted"
_STEP_SUFFIXES: Final = (CLEANED, SWAP, DELETED)


def _path(directory: str, base: int, suffix: str, step: str = "") -> str:
    return os.path.join(directory, format_segment_name(base, suffix) + step)


@dataclass
class SwapRecovery:
    """What :func:`recover_swaps` found and did in one partition directory."""

    finished: list[int] = field(default_factory=list)  # bases of rewrites completed at open
    dropped: list[str] = field(default_factory=list)  # names of files removed (uncommitted or retired)

    @property
    def changed(self) -> bool:
        return bool(self.finished or self.dropped)


# -- the steps ------------------------------------------------------------------------------------------


class CleanedWriter:
    """Step 1: write ``{base}.seg.cleaned`` batch by batch, with its sparse index; :meth:`finish` fsyncs.

    Not thread-safe (the cleaner's thread). The batches must continue each other's offsets.
    """

    def __init__(self, directory: str, base: int, index_interval_bytes: int) -> None:
        self.directory = directory
        self.base = base
        self.size = 0
        self.next_offset = base
        self._interval = index_interval_bytes
        self._last_indexed = -1
        self._index = bytearray()
        self._path = _path(directory, base, SEGMENT_SUFFIX, CLEANED)
        with map_os_errors("write cleaned segment", self._path):
            self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)

    def append(self, batch: bytes | memoryview, base_offset: int, next_offset: int) -> None:
        invariant(
            base_offset == self.next_offset, f"a rewritten batch at {base_offset} does not continue {self.next_offset}"
        )
        if self._last_indexed < 0 or self.size - self._last_indexed >= self._interval:
            self._index += ENTRY.pack(base_offset, self.size)
            self._last_indexed = self.size
        view = memoryview(batch)
        with map_os_errors("write cleaned segment", self._path):
            while view:
                view = view[os.write(self._fd, view) :]
        self.size += len(batch)
        self.next_offset = next_offset

    def finish(self, sealed_ms: int) -> None:
        """fsync the segment, write and fsync the index, date the segment ``sealed_ms``, fsync the directory."""
        with map_os_errors("write cleaned segment", self._path):
            os.fdatasync(self._fd)
            os.close(self._fd)
            self._fd = -1
            index_path = _path(self.directory, self.base, INDEX_SUFFIX, CLEANED)
            fd = os.open(index_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                view = memoryview(self._index)
                while view:
                    view = view[os.write(fd, view) :]
                os.fdatasync(fd)
            finally:
                os.close(fd)
            # The segment's time (tombstone horizons, min.compaction.lag.ms) is that of what it replaces.
            os.utime(self._path, ns=(sealed_ms * 1_000_000, sealed_ms * 1_000_000))
        fsync_dir(self.directory)

    def abandon(self) -> None:
        """Close and remove what was written (the clean was given up before its commit point)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
        discard(self.directory, self.base)


def commit(directory: str, base: int) -> None:
    """Step 2: the commit point (``.seg.cleaned`` becomes ``.seg.swap``)."""
    for suffix in (INDEX_SUFFIX, SEGMENT_SUFFIX):
        with map_os_errors("commit cleaned segment", directory):
            os.rename(_path(directory, base, suffix, CLEANED), _path(directory, base, suffix, SWAP))
    fsync_dir(directory)


def retire(directory: str, bases: Iterable[int]) -> None:
    """Step 3: rename the old segments' files ``.deleted`` (their descriptors are closed by the caller)."""
    for base in bases:
        for suffix in (SEGMENT_SUFFIX, INDEX_SUFFIX):
            with contextlib.suppress(FileNotFoundError), map_os_errors("retire old segment", directory):
                os.rename(_path(directory, base, suffix), _path(directory, base, suffix, DELETED))


def install(directory: str, base: int) -> None:
    """Step 4: the ``.swap`` files take their final names."""
    for suffix in (INDEX_SUFFIX, SEGMENT_SUFFIX):
        with map_os_errors("install cleaned segment", directory):
            os.rename(_path(directory, base, suffix, SWAP), _path(directory, base, suffix))
    fsync_dir(directory)


def remove_retired(directory: str, bases: Iterable[int]) -> None:
    """Step 5: remove the ``.deleted`` files of ``bases`` (a failure leaves them to the next open)."""
    for base in bases:
        for suffix in (SEGMENT_SUFFIX, INDEX_SUFFIX):
            with contextlib.suppress(OSError):
                os.remove(_path(directory, base, suffix, DELETED))


def discard(directory: str, base: int) -> None:
    """Remove an uncommitted rewrite's ``.cleaned`` files (a clean that was abandoned)."""
    for suffix in (SEGMENT_SUFFIX, INDEX_SUFFIX):
        with contextlib.suppress(OSError):
            os.remove(_path(directory, base, suffix, CLEANED))


# -- recovery ---------------------------------------------------------------------------------------------


def _split(name: str) -> tuple[int, str, str] | None:
    """``"00..42.seg.swap"`` -> ``(42, ".seg", ".swap")``; None for names without a step suffix."""
    for step in _STEP_SUFFIXES:
        if name.endswith(step):
            parsed = parse_segment_name(name[: -len(step)])
            return None if parsed is None else (parsed[0], parsed[1], step)
    return None


def recover_swaps(directory: str) -> SwapRecovery:
    """Finish or undo every rewrite a crash interrupted in ``directory`` (see the module docstring)."""
    report = SwapRecovery()
    names = os.listdir(directory)
    steps = [(name, parsed) for name in names if (parsed := _split(name)) is not None]
    if not steps:
        return report
    swapped = sorted(base for _, (base, suffix, step) in steps if step == SWAP and suffix == SEGMENT_SUFFIX)
    for name, (base, suffix, step) in steps:
        uncommitted = step == CLEANED or (step == SWAP and suffix == INDEX_SUFFIX and base not in swapped)
        if uncommitted or step == DELETED:
            os.remove(os.path.join(directory, name))
            report.dropped.append(name)
    for base in swapped:
        _finish(directory, base, report)
    fsync_dir(directory)
    return report


def _finish(directory: str, base: int, report: SwapRecovery) -> None:
    swap_path = _path(directory, base, SEGMENT_SUFFIX, SWAP)
    end = _end_offset(swap_path, base)
    present = {
        parsed[0]: name
        for name in os.listdir(directory)
        if (parsed := parse_segment_name(name)) is not None and parsed[1] == SEGMENT_SUFFIX
    }
    index_swap = _path(directory, base, INDEX_SUFFIX, SWAP)
    # Step 4 renames the new index before the new segment, and only after step 3 retired every
    # old file: an {base}.idx with no .idx.swap and no old {base}.seg beside it is the new one.
    keep_index = not os.path.exists(index_swap) and base not in present
    for old in sorted(b for b in present if base <= b < end):
        for suffix in (SEGMENT_SUFFIX, INDEX_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.remove(_path(directory, old, suffix))
                report.dropped.append(format_segment_name(old, suffix))
    if os.path.exists(index_swap):
        os.replace(index_swap, _path(directory, base, INDEX_SUFFIX))
    elif not keep_index:
        with contextlib.suppress(FileNotFoundError):
            os.remove(_path(directory, base, INDEX_SUFFIX))  # an old one: rebuilt from the new segment
    os.replace(swap_path, _path(directory, base, SEGMENT_SUFFIX))
    report.finished.append(base)
    log.warning("finished the rewrite of %s segment %d interrupted by a crash (offsets up to %d)", directory, base, end)


def _end_offset(path: str, base: int) -> int:
    """The offset after the last batch of a committed (fsynced, contiguous) rewritten segment."""
    end = base
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        position = 0
        while size - position >= HEADER_SIZE:
            head = os.pread(f.fileno(), HEADER_SIZE, position)
            batch_base, batch_size = read_length_prefix(head)
            last_delta = int.from_bytes(head[23:27], "big", signed=True)
            if batch_size < HEADER_SIZE or batch_size < LOG_OVERHEAD:
                break
            end = batch_base + last_delta + 1
            position += batch_size
    return end
