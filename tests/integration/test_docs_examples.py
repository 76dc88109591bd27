"""The README's and the docs' code blocks run as a user pastes them, twice in a row (issue 13).

:mod:`tests.integration.doc_runner` says what runs, where, and how ports are
substituted so the test never collides with other runs on the machine. A block
that fails names its file and line, the round, and its output.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.doc_runner import Block, Workspace, documents, extract

ROUNDS = 2


def _blocks() -> list[Block]:
    return [block for path in documents() for block in extract(path)]


def test_every_runnable_doc_block_runs_or_says_why_not() -> None:
    blocks = _blocks()
    by_file: dict[str, list[Block]] = {}
    for block in blocks:
        by_file.setdefault(block.path, []).append(block)
    assert [b.kind for b in by_file["docs/quickstart.md"]].count("daemon") == 1
    assert sum(b.kind == "run" for b in by_file["docs/quickstart.md"]) >= 6
    assert sum(b.kind == "run" for b in by_file["README.md"]) >= 3
    assert all(b.reason for b in blocks if b.kind == "skip")
    # One spelling of the CLI in what users paste: `lkstream` after activating the venv.
    for block in blocks:
        assert ".venv/bin/lkstream" not in block.code, block.where


def _fail(block: Block, round_: int, output: str) -> str:
    return f"round {round_}: {block.where} ({block.language} block) failed:\n{block.code}\n--- output ---\n{output}"


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_readme_and_the_docs_run_as_pasted_twice_in_a_row(tmp_path: Path) -> None:
    workspace = Workspace.create(tmp_path / "checkout")
    runnable = [block for block in _blocks() if block.kind != "skip"]
    for round_ in range(1, ROUNDS + 1):
        try:
            for block in runnable:
                if block.kind == "daemon":
                    ready = workspace.start_daemon(block)
                    assert f"grpc=127.0.0.1:{workspace.ports['9090']}" in ready, ready
                    continue
                done = workspace.run(block)
                output = done.stdout[-4000:] + done.stderr[-4000:]
                assert done.returncode == 0, _fail(block, round_, output)
                assert "Traceback" not in done.stderr, _fail(block, round_, output)
        finally:
            workspace.stop_daemon()
        log = "".join(workspace.daemon_output)
        assert "stopped cleanly" in log, log[-4000:]
        assert "Traceback" not in log, log[-4000:]
        workspace.daemon_output.clear()
