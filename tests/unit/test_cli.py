"""The lkstream command line in process: dump, verify, offline produce/consume, JSON lines, tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lkstream import Broker
from lkstream.cli import cli, render_bytes
from lkstream.cli.base import print_table
from lkstream.cli.bench import percentile
from lkstream.cli.produce import BadLineError, parse_json_line
from lkstream.cli.sending import Line
from lkstream.storage.clock import ManualClock

from .datadir import SEGMENT_BYTES, VALUE, batch_positions, flip_byte, segment_paths

REPO = Path(__file__).resolve().parents[2]
ENTRY_POINT = Path(sys.executable).with_name("lkstream")
TIMESTAMP = 1_700_000_000_000


def build(data_dir: str, batches: int = 10) -> None:
    """Ten batches of three 300-byte records, four batches per 4 KiB segment."""
    with Broker(persist_dir=data_dir, segment_max_bytes=SEGMENT_BYTES, index_interval_bytes=0) as broker:
        for n in range(batches):
            broker.produce_many_sync("t", [(f"k{n}".encode(), VALUE)] * 3)


def run_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), check=False, capture_output=True, text=True, timeout=60, env=env, cwd=REPO)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


# -- verify ------------------------------------------------------------------------------------------


def test_verify_exits_0_on_a_clean_data_dir(data_dir: str) -> None:
    build(data_dir)
    code, out = run("verify", data_dir)
    assert code == 0, out
    assert "summary: ok: 0 errors, 0 warnings" in out
    assert "3 segments" in out and "30 records" in out


def test_verify_exits_1_naming_file_and_position_of_a_flipped_byte(data_dir: str) -> None:
    build(data_dir)
    sealed = segment_paths(data_dir)[0]
    position = batch_positions(sealed)[1]
    flip_byte(sealed, position + 200)
    code, out = run("verify", data_dir)
    assert code == 1, out
    assert f"ERROR   {sealed} at byte {position}: CRC-32C mismatch" in out
    assert "summary: corrupt: 1 error" in out


def test_verify_exits_2_for_a_missing_or_foreign_directory(tmp_path: Path) -> None:
    code, out = run("verify", str(tmp_path / "nope"))
    assert code == 2 and "does not exist" in out
    code, out = run("verify", str(tmp_path))
    assert code == 2 and "not an LKSTREAM data directory" in out


def test_verify_warns_about_a_torn_tail_and_fails_only_when_strict(data_dir: str) -> None:
    build(data_dir)
    active = segment_paths(data_dir)[-1]
    size = os.path.getsize(active)
    with open(active, "ab") as f:
        f.write(b"\0" * 30)
    code, out = run("verify", data_dir)
    assert code == 0, out
    assert f"WARNING {active} at byte {size}: torn tail: recovery would truncate the last 30 bytes" in out
    code, out = run("verify", "--strict", "--quiet", data_dir)
    assert code == 1
    assert "TOPIC" not in out  # --quiet leaves out the table


# -- dump --------------------------------------------------------------------------------------------


def test_dump_prints_batches_and_records(data_dir: str) -> None:
    with Broker(persist_dir=data_dir) as broker:
        broker.produce_many_sync("t", [(b"k0", b"hello"), (None, b"\x00\xff", [("h", b"x"), ("n", None)])])
        broker.produce_many_sync("t", [(b"k2", b"")], compression="gzip")
    seg = segment_paths(data_dir)[0]
    code, out = run("dump", "--records", seg)
    assert code == 0, out
    lines = out.splitlines()
    batch_lines = [line for line in lines if line.startswith("position:")]
    assert len(batch_lines) == 2
    assert "baseOffset: 0 lastOffset: 1 count: 2" in batch_lines[0] and "crcOk: true" in batch_lines[0]
    assert "baseOffset: 2 lastOffset: 2 count: 1" in batch_lines[1] and "compression: gzip" in batch_lines[1]
    records = [line for line in lines if line.startswith("| ")]
    assert records[0].startswith("| offset: 0 timestamp: ") and 'key: "k0" value: "hello" headers: []' in records[0]
    assert 'key: null value: hex:00ff headers: ["h"="x", "n"=null]' in records[1]
    assert 'key: "k2" value: "" headers: []' in records[2]
    assert lines[-1] == f"summary: 2 valid batches, 3 records, offsets 0..2, {os.path.getsize(seg)} of " + (
        f"{os.path.getsize(seg)} bytes valid, 0 problems"
    )


def test_dump_without_records_prints_one_line_per_batch(data_dir: str) -> None:
    build(data_dir)
    code, out = run("dump", segment_paths(data_dir)[1])
    assert code == 0
    starts = [line.split()[3] for line in out.splitlines() if line.startswith("position:")]
    assert starts == ["12", "15", "18", "21"]
    assert not any(line.startswith("| ") for line in out.splitlines())


def test_dump_marks_a_batch_whose_crc_does_not_match(data_dir: str) -> None:
    build(data_dir)
    seg = segment_paths(data_dir)[0]
    position = batch_positions(seg)[2]
    flip_byte(seg, position + 300)
    code, out = run("dump", "--records", seg)
    assert code == 0
    bad = [line for line in out.splitlines() if line.startswith(f"position: {position} ")]
    assert len(bad) == 1 and "crcOk: false" in bad[0] and "problem: CRC-32C mismatch" in bad[0]
    assert "1 problem" in out.splitlines()[-1]


def test_dump_index_checks_entries_against_the_segment(data_dir: str) -> None:
    build(data_dir)
    seg = segment_paths(data_dir)[0]
    for target in (seg, seg[:-4] + ".idx"):
        code, out = run("dump", "--index", target)
        assert code == 0, out
        entries = [line for line in out.splitlines() if line.startswith("entry:")]
        assert [line.split()[3] for line in entries] == ["0", "3", "6", "9"]
        assert all(line.endswith("check: ok") for line in entries)
    code, out = run("dump", seg[:-4] + ".idx")  # an .idx is dumped as an index without --index
    assert code == 0 and "summary: 4 entries, 0 problems" in out


def test_dump_of_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    code, _ = run("dump", str(tmp_path / "00000000000000000000.seg"))
    assert code == 2


def test_render_bytes_is_unambiguous() -> None:
    assert render_bytes(None) == "null"
    assert render_bytes(b'say "hi"') == '"say \\"hi\\""'
    assert render_bytes(b"line\n") == "hex:6c696e650a"
    assert render_bytes(b"\xff", "base64") == "base64:/w=="
    assert render_bytes("é".encode()) == '"é"'


# -- the installed entry point, as a real process ----------------------------------------------------


# `make test` installs the package, so the console script exists; a bare `pytest` run in a
# checkout that was never installed has no entry point to run.
@pytest.mark.skipif(not ENTRY_POINT.exists(), reason=f"no installed entry point at {ENTRY_POINT}")
def test_installed_entry_point_verifies_and_exits_with_the_documented_status(data_dir: str) -> None:
    build(data_dir)
    clean = run_process(str(ENTRY_POINT), "verify", data_dir)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    sealed = segment_paths(data_dir)[0]
    position = batch_positions(sealed)[3]
    flip_byte(sealed, position + 80)
    corrupt = run_process(str(ENTRY_POINT), "verify", data_dir)
    assert corrupt.returncode == 1
    assert f"ERROR   {sealed} at byte {position}: CRC-32C mismatch" in corrupt.stdout
    missing = run_process(str(ENTRY_POINT), "verify", data_dir + "-nope")
    assert missing.returncode == 2


def test_python_dash_m_runs_the_cli(data_dir: str, subprocess_env: dict[str, str]) -> None:
    build(data_dir, batches=1)
    done = run_process(sys.executable, "-m", "lkstream.cli", "dump", segment_paths(data_dir)[0], env=subprocess_env)
    assert done.returncode == 0, done.stderr
    assert "baseOffset: 0 lastOffset: 2 count: 3" in done.stdout


# -- produce / consume on a data directory, in process -----------------------------------------------


def test_produce_then_consume_a_data_dir_offline(data_dir: str) -> None:
    stdin = '{"key": "a", "value": "1", "headers": {"h": "x"}}\n{"value": {"base64": "/w=="}, "partition": 0}\n'
    result = CliRunner().invoke(cli, ["produce", "t", "--data-dir", data_dir, "--json"], input=stdin)
    assert result.exit_code == 0, result.output
    assert result.output == f"2 records acknowledged by {data_dir} (topic t)\n"
    with Broker(persist_dir=data_dir) as broker:
        records = [r for pid in range(broker.partitions_for("t")) for r in broker.read_from("t", pid, 0)]
    assert sorted((r.key, r.value, list(r.headers)) for r in records if r.key) == [(b"a", b"1", [("h", b"x")])]
    result = CliRunner().invoke(cli, ["consume", "t", "--data-dir", data_dir, "--partition", "0", "--output", "json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert rows[-1]["value"] == {"base64": "/w=="}


def test_consume_offline_from_a_timestamp(data_dir: str) -> None:
    clock = ManualClock(TIMESTAMP)
    with Broker(persist_dir=data_dir, partitions=1, clock=clock) as broker:
        for n in range(4):
            broker.produce_many_sync("ts", [(None, f"v{n}".encode())])
            clock.advance(1000)
    code, out = run("consume", "ts", "--data-dir", data_dir, "--from-timestamp", str(TIMESTAMP + 1500))
    assert (code, out) == (0, "v2\nv3\n")
    code, out = run("consume", "ts", "--data-dir", data_dir, "--from-timestamp", str(TIMESTAMP + 10_000))
    assert (code, out) == (0, "")


def test_parse_json_line_accepts_the_documented_shapes_and_names_bad_lines() -> None:
    line = parse_json_line(b'{"key": null, "value": "v", "headers": {"b": {"base64": "AA=="}}}', 1)
    assert line == Line(None, b"v", [("b", b"\x00")], None, None)
    line = parse_json_line('{"key": "é", "value": null, "partition": 3}'.encode(), 2)
    assert line == Line("é".encode(), None, [], 3, None)
    # What `consume --output json` prints is accepted as it is: the partition and the timestamp are kept,
    # topic and offset are ignored.
    printed = (
        b'{"topic": "t", "partition": 1, "offset": 7, "timestamp": 1795663613751, "key": {"base64": "/w=="}, '
        b'"value": "v", "headers": [{"key": "h", "value": null}, {"key": "h", "value": {"base64": "AA=="}}]}'
    )
    assert parse_json_line(printed, 3) == Line(b"\xff", b"v", [("h", None), ("h", b"\x00")], 1, 1795663613751)
    # The key_encoding/value_encoding form of older `consume` output still reads.
    assert parse_json_line(
        b'{"key": "", "key_encoding": "base64", "value": "AAE=", "value_encoding": "base64"}', 4
    ) == Line(b"", b"\x00\x01", [], None, None)
    bad_lines = {
        b"{": "not valid JSON",
        b"\xff": "not valid JSON",
        b'["a list"]': "not a JSON object",
        b'{"key": "k"}': 'no "value" field',
        b'{"value": "v", "vaule": 1}': "unknown field(s) vaule",
        b'{"value": {"base64": "@@@"}}': '"value" is not valid base64',
        b'{"value": {"base64": 1}}': '"value" must be a string',
        b'{"value": true}': '"value" must be a string',
        b'{"value": "v", "partition": true}': '"partition" must be a non-negative integer',
        b'{"value": "v", "partition": -1}': '"partition" must be a non-negative integer',
        b'{"value": "v", "headers": ["h"]}': 'header 0 must be an object {"key": name, "value": value}',
        b'{"value": "v", "headers": "h"}': '"headers" must be a list',
        b'{"value": "v", "headers": {"h": 1}}': "header 'h' must be a string",
        b'{"value": "v", "headers": [{"key": "h", "value": 1}]}': "header 'h' must be a string",
        b'{"value": "v", "offset": "3"}': '"offset" must be an integer',
        b'{"value": "v", "timestamp": 1.5}': '"timestamp" must be an integer',
        b'{"value": "v", "timestamp": -1}': '"timestamp" must be a non-negative integer',
        b'{"value": "v", "topic": 7}': '"topic" must be a string',
        b'{"value": "AAE=", "value_encoding": "hex"}': '"value_encoding" must be "base64"',
    }
    for bad, reason in bad_lines.items():
        with pytest.raises(BadLineError) as info:
            parse_json_line(bad, 9)
        assert str(info.value).startswith(f"line 9: {reason}"), (bad, str(info.value))
        assert info.value.number == 9


def test_percentile_is_nearest_rank() -> None:
    samples = [float(n) for n in range(1, 101)]
    assert (percentile(samples, 0.5), percentile(samples, 0.99), percentile(samples, 1.0)) == (50.0, 99.0, 100.0)
    assert percentile([], 0.5) == 0.0
    assert percentile([7.0], 0.99) == 7.0


def test_both_targets_at_once_is_a_usage_error(data_dir: str) -> None:
    for args in (["produce", "t"], ["consume", "t"], ["bench", "produce"]):
        code, out = run(*args, "--data-dir", data_dir, "--bootstrap", "127.0.0.1:9")
        assert code == 2 and "mutually exclusive" in out, out


def test_tables_in_a_pipe_are_plain_aligned_columns(capsys: pytest.CaptureFixture[str]) -> None:
    print_table([[1, "a"], [22, "bbb"]], ("N", "NAME"))
    assert capsys.readouterr().out == " N  NAME\n 1     a\n22   bbb\n"
