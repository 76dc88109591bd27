"""Offline commands: ``dump`` and ``verify`` read a data directory, never a daemon.

::

    lkstream dump FILE [--records] [--index] [--binary hex|base64]
    lkstream verify DATA_DIR [--strict] [--quiet]

Invariants:

* **Offline commands only read.** ``dump`` goes through
  :mod:`lkstream.storage.reader` and ``verify`` through
  :mod:`lkstream.storage.verify`: files are opened read-only, nothing is
  written or repaired, and the data directory's ``LOCK`` is never taken, so
  they are safe beside a running broker (whose newest batch may then look torn).
* **Exit status is a contract** scripts can rely on:

  - 0: success; for ``verify``, no errors (warnings allowed unless ``--strict``);
  - 1: ``verify`` found corruption (or warnings under ``--strict``), or an
    I/O error stopped a command;
  - 2: usage error: unknown option, missing file or directory, a directory
    that is not a data directory.

* **Output is line-oriented** ``key: value`` text (as kafka-dump-log prints),
  so ``grep``/``awk`` work on it; keys, values and headers print as JSON
  strings when they are printable UTF-8 and as ``hex:``/``base64:`` otherwise,
  so every value is unambiguous.

Errors these commands do not handle are mapped to exit statuses once, in
:class:`lkstream.cli.base._Group`.
"""

from __future__ import annotations

import os

import click

from lkstream.cli.base import EXIT_PROBLEMS, batch_line, cli, record_lines
from lkstream.errors import InvalidArgumentError, count_of
from lkstream.format.batch import HEADER_SIZE, MAGIC, compute_crc, parse_header
from lkstream.storage.files import StorageFile
from lkstream.storage.reader import ScanProblem, open_read_only, read_index_entries, scan_segment
from lkstream.storage.segment import INDEX_SUFFIX, SEGMENT_SUFFIX, parse_segment_name
from lkstream.storage.verify import PartitionSummary, Problem, VerifyReport, verify_data_dir

# -- dump ------------------------------------------------------------------------------------------


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--records", is_flag=True, help="Decode and print every record of each valid batch.")
@click.option(
    "--index", "as_index", is_flag=True, help="Dump the offset index: FILE if it is an .idx, else FILE's .idx."
)
@click.option(
    "--binary",
    type=click.Choice(["hex", "base64"]),
    default="hex",
    show_default=True,
    help="How to print keys, values and headers that are not printable UTF-8.",
)
def dump(file: str, records: bool, as_index: bool, binary: str) -> None:
    """Print the batches of a segment file (.seg), or the entries of an index file (.idx).

    Each batch: position, base and last offset, record count, size, CRC and
    whether it matches, compression, timestamps. Invalid batches are printed
    with the problem found; the walk continues past one only when the next
    batch can be found. Exit status is 0 whenever FILE could be read: use
    `lkstream verify` for a pass/fail check.
    """
    if as_index or file.endswith(INDEX_SUFFIX):
        index = file if file.endswith(INDEX_SUFFIX) else os.path.splitext(file)[0] + INDEX_SUFFIX
        if not os.path.exists(index):
            raise click.ClickException(f"no index file {index}")
        _dump_index(index)
    else:
        _check_segment(file)
        _dump_segment(file, records, binary)


def _check_segment(path: str) -> None:
    """Refuse (usage error) a file that is neither named nor shaped like a segment.

    A file named ``<20 digits>.seg`` is always dumped, however damaged: that is
    what dump is for. Any other name must start with a record batch header
    (magic 2 and a plausible length), so ``dump README.md`` says what is wrong
    instead of printing a batch made of prose.
    """
    parsed = parse_segment_name(os.path.basename(path))
    if parsed is not None and parsed[1] == SEGMENT_SUFFIX:
        return
    file = open_read_only(path)
    try:
        head = file.pread(HEADER_SIZE, 0)
    finally:
        file.close()
    if len(head) == HEADER_SIZE:
        header = parse_header(head)
        if header.magic == MAGIC and header.size >= HEADER_SIZE:
            return
        found = f"byte 16 (magic) is {header.magic}, not {MAGIC}"
    else:
        found = f"it has {len(head)} bytes, less than one batch header ({HEADER_SIZE})"
    raise click.BadParameter(
        f"{path} is not a segment (.seg) or index (.idx) file: it does not start with a record batch ({found})",
        param_hint="FILE",
    )


def _dump_segment(path: str, with_records: bool, binary: str) -> None:
    parsed = parse_segment_name(os.path.basename(path))
    # Offsets are checked for continuity from the base offset the file name promises.
    expected = parsed[0] if parsed is not None and parsed[1] == SEGMENT_SUFFIX else None
    file = open_read_only(path)
    try:
        size = file.size()
        click.echo(f"Dumping {path}")
        click.echo(f"size: {size}" + ("" if expected is None else f" baseOffset: {expected}"))
        batches = records = valid_bytes = problems = 0
        first = last = None
        for item in scan_segment(file, expected_offset=expected, with_data=with_records):
            if isinstance(item, ScanProblem):
                problems += 1
                click.echo(_problem_batch_line(file, item, size))
                continue
            header = item.header
            batches, records, valid_bytes = batches + 1, records + header.records_count, valid_bytes + header.size
            first = header.base_offset if first is None else first
            last = header.last_offset
            click.echo(batch_line(item.position, header, "true"))
            if item.data is not None:
                for line in record_lines(item.data, binary):
                    click.echo(line)
    finally:
        file.close()
    offsets = "" if first is None else f", offsets {first}..{last}"
    click.echo(
        f"summary: {count_of(batches, 'valid batch', 'valid batches')}, {count_of(records, 'record')}{offsets}, "
        f"{valid_bytes} of {size} bytes valid, {count_of(problems, 'problem')}"
    )


def _problem_batch_line(file: StorageFile, problem: ScanProblem, size: int) -> str:
    header = problem.header
    if header is None:
        line = f"position: {problem.position} problem: {problem.reason}"
    else:
        # The scan only says why the batch failed; recompute the CRC so the line says whether it matches.
        crc_ok = "unknown"
        if HEADER_SIZE <= header.size <= size - problem.position:
            crc_ok = "true" if compute_crc(file.pread(header.size, problem.position)) == header.crc else "false"
        line = f"{batch_line(problem.position, header, crc_ok)} problem: {problem.reason}"
    if not problem.resumable:
        line += f"\nstopped: no batch can be found after this; bytes {problem.position}..{size} were not walked"
    return line


def _dump_index(path: str) -> None:
    seg_path = path[: -len(INDEX_SUFFIX)] + SEGMENT_SUFFIX
    index = open_read_only(path)
    segment = open_read_only(seg_path) if os.path.exists(seg_path) else None
    try:
        entries, trailing = read_index_entries(index)
        click.echo(f"Dumping index {path}")
        click.echo(f"entries: {len(entries)} segment: {seg_path if segment else 'missing: entries not checked'}")
        problems = 0
        for i, (offset, position) in enumerate(entries):
            note = _entry_note(entries, i, segment)
            problems += note not in ("ok", "unchecked")
            click.echo(f"entry: {i} offset: {offset} position: {position} check: {note}")
        if trailing:
            problems += 1
            click.echo(f"trailing: {trailing} bytes (the size is not a multiple of 16)")
    finally:
        index.close()
        if segment is not None:
            segment.close()
    click.echo(f"summary: {len(entries)} entries, {count_of(problems, 'problem')}")


def _entry_note(entries: list[tuple[int, int]], i: int, segment: StorageFile | None) -> str:
    offset, position = entries[i]
    if i and (offset <= entries[i - 1][0] or position <= entries[i - 1][1]):
        return f"not above entry {i - 1}"
    if segment is None:
        return "unchecked"
    if position + HEADER_SIZE > segment.size():
        return f"points past the end of the segment ({segment.size()} bytes)"
    header = parse_header(segment.pread(HEADER_SIZE, position))
    if header.magic != MAGIC:
        return "no batch header at this position"
    if header.base_offset != offset:
        return f"the batch here has base offset {header.base_offset}"
    return "ok"


# -- verify ----------------------------------------------------------------------------------------


@cli.command()
@click.argument("data_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too (torn tails, missing indexes, stray files).")
@click.option("-q", "--quiet", is_flag=True, help="Print only the problems and the summary line.")
@click.pass_context
def verify(ctx: click.Context, data_dir: str, strict: bool, quiet: bool) -> None:
    """Check every segment, index, checkpoint and offset file of DATA_DIR.

    Segments: length, magic, CRC-32C of every batch, offsets continuous within
    and across segments, torn tails. Indexes: size, monotonic entries that
    point at batch starts with the right base offsets. Plus checkpoint.meta,
    topic.json and committed offset files. Reads only; safe beside a running
    broker.

    ERROR lines are corruption. WARNING lines are states the broker repairs or
    tolerates on open, such as a torn tail after a crash. Exit status: 0 when
    there are no errors, 1 when there are (or warnings with --strict).
    """
    try:
        report = verify_data_dir(data_dir)
    except InvalidArgumentError as exc:
        raise click.BadParameter(str(exc), ctx, param_hint="DATA_DIR") from exc
    if not quiet:
        click.echo(f"Verifying {data_dir}")
        for line in _partition_table(report.partitions):
            click.echo(line)
    if report.lock_holder is not None:
        click.echo(
            f"note: a broker (pid {report.lock_holder}) holds this data directory: its active "
            "segments may change while they are read, and a batch being written looks like a torn tail"
        )
    for problem in report.problems:
        click.echo(_problem_line(problem))
    click.echo(_summary_line(report))
    if report.errors or (strict and report.warnings):
        ctx.exit(EXIT_PROBLEMS)


def _partition_table(partitions: list[PartitionSummary]) -> list[str]:
    rows = [["TOPIC", "PARTITION", "SEGMENTS", "BYTES", "BATCHES", "RECORDS", "START", "END", "STATUS"]]
    for p in partitions:
        status = (
            "ok"
            if not (p.errors or p.warnings)
            else f"{count_of(p.errors, 'error')}, {count_of(p.warnings, 'warning')}"
        )
        end = "?" if p.end_offset is None else str(p.end_offset)
        counts = (p.partition, p.segments, p.size_bytes, p.batches, p.records, p.log_start_offset)
        rows.append([p.topic, *map(str, counts), end, status])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def _problem_line(problem: Problem) -> str:
    where = problem.path if problem.position is None else f"{problem.path} at byte {problem.position}"
    return f"{problem.severity.upper():7} {where}: {problem.message}"


def _summary_line(report: VerifyReport) -> str:
    parts = report.partitions
    topics = len({p.topic for p in parts})
    segments = sum(p.segments for p in parts)
    size = sum(p.size_bytes for p in parts)
    records = sum(p.records for p in parts)
    verdict = "corrupt" if report.errors else "ok"
    return (
        f"summary: {verdict}: {count_of(report.errors, 'error')}, {count_of(report.warnings, 'warning')}; "
        f"checked {count_of(topics, 'topic')}, {count_of(len(parts), 'partition')}, {count_of(segments, 'segment')} "
        f"({size} bytes, {count_of(records, 'record')}), {count_of(report.offset_files, 'offset file')}"
    )
