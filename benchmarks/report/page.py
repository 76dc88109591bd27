"""The generated tables of a Markdown page: find them, render them from their files, check or write them.

A table is the text between ``<!-- table NAME: FILE [FILE ...] -->`` and ``<!-- /table -->``; the
files are paths from the repository's root. Everything outside the markers is written by hand and
left alone.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.report.fmt import Result
from benchmarks.report.tables import TABLES

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
PAGE = REPO / "docs" / "benchmarks.md"

START = re.compile(r"^<!-- table (?P<name>[a-z0-9-]+): (?P<files>[^>]+?) -->$", re.MULTILINE)
END = "<!-- /table -->"
# A result file's kind is its name before the UTC stamp: peers-20261128T045306Z.json -> peers.
STAMPED = re.compile(r"^(?P<kind>.+?)-\d{8}T\d{4,6}Z")
# A result cited by its path (it must exist), or by its stamped name alone (how prose names a run).
CITED_PATH = re.compile(r"benchmarks/results/([A-Za-z0-9_+-]+\.(?:json|txt|log))")
CITED_NAME = re.compile(r"\b([a-z][a-z0-9_]*(?:-[a-z0-9_]+)*-\d{8}T\d{4,6}Z(?:-[a-z0-9]+)*)\b")


class PageError(Exception):
    """A marker without its end, an unknown table, a cited file that is missing or of the wrong kind."""


@dataclass(frozen=True)
class Block:
    """One generated table: where its text is in the page, its name and its files."""

    name: str
    files: tuple[str, ...]
    body_start: int  # offset of the first character after the start marker's line
    body_end: int  # offset of the end marker


def blocks(text: str) -> list[Block]:
    """The generated tables of ``text``, in order."""
    found = []
    for start in START.finditer(text):
        end = text.find(END, start.end())
        nxt = START.search(text, start.end())
        if end < 0 or (nxt is not None and nxt.start() < end):
            raise PageError(f"table {start['name']!r}: no {END} before the next table")
        found.append(Block(start["name"], tuple(start["files"].split()), start.end() + 1, end))
    return found


def kind(path: str) -> str:
    """``peers`` for ``benchmarks/results/peers-20261128T045306Z.json``."""
    match = STAMPED.match(Path(path).name)
    return match["kind"] if match else Path(path).stem


_LOADED: dict[tuple[Path, int], dict[str, Any]] = {}  # a peer result is read by a dozen tables


def load(path: str, root: Path = REPO) -> Result:
    file = root / path
    if not file.is_file():
        raise PageError(f"{path}: cited but not in the tree")
    key = (file.resolve(), file.stat().st_mtime_ns)
    if key not in _LOADED:
        _LOADED[key] = json.loads(file.read_text())
    return Result(path, _LOADED[key])


def render(block: Block, root: Path = REPO) -> str:
    """The Markdown of one table, from its files (ends with a newline)."""
    spec = TABLES.get(block.name)
    if spec is None:
        raise PageError(f"unknown table {block.name!r} (known: {', '.join(sorted(TABLES))})")
    if len(block.files) != len(spec.kinds) or any(kind(f) != k for f, k in zip(block.files, spec.kinds, strict=False)):
        raise PageError(f"table {block.name!r} reads {' '.join(spec.kinds)} results, not {' '.join(block.files)}")
    return "\n".join(spec.render(*[load(f, root) for f in block.files])).rstrip("\n") + "\n"


def regenerate(text: str, root: Path = REPO) -> str:
    """``text`` with every generated table rendered again from its files."""
    out, last = [], 0
    for block in blocks(text):
        out += [text[last : block.body_start], render(block, root)]
        last = block.body_end
    return "".join([*out, text[last:]])


def repoint(text: str, new: str) -> str:
    """``text`` with every cited result of ``new``'s kind replaced by ``new`` (in the table markers)."""
    wanted = kind(new)

    def swap(match: re.Match[str]) -> str:
        files = " ".join(new if kind(f) == wanted else f for f in match["files"].split())
        return f"<!-- table {match['name']}: {files} -->"

    return START.sub(swap, text)


def cited(texts: list[str]) -> set[str]:
    """Stems of the result files the pages name, by path or by stamped name."""
    return {Path(n).stem for t in texts for n in CITED_PATH.findall(t)} | {
        n for t in texts for n in CITED_NAME.findall(t)
    }


# The investigation notes name earlier runs by their stamped names; git keeps those files, the tree need not.
HISTORY = "benchmarks-notes.md"


def doc_pages(root: Path = REPO) -> list[Path]:
    """Every page whose citations keep a result in the tree: README.md and docs/**/*.md but the notes."""
    return [root / "README.md", *sorted(p for p in (root / "docs").rglob("*.md") if p.name != HISTORY)]


def result_files(root: Path = REPO) -> list[str]:
    """The result files of the tree: those git tracks (a smoke run's local result is no one's business),
    or every file of the folder outside a git checkout."""
    folder = root / "benchmarks" / "results"
    if (root / ".git").exists():
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "--", "benchmarks/results"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return sorted(Path(line).name for line in listed.stdout.splitlines() if (root / line).is_file())
    return sorted(p.name for p in folder.iterdir() if p.is_file())


def uncited(root: Path = REPO) -> list[str]:
    """Result files in the tree that no page cites (``git rm`` them: git keeps old runs)."""
    names = cited([p.read_text() for p in doc_pages(root)])
    return [name for name in result_files(root) if Path(name).stem not in names]


def missing(root: Path = REPO) -> list[str]:
    """Result files the pages cite by path that are not in the tree."""
    paths = {n for p in doc_pages(root) for n in CITED_PATH.findall(p.read_text())}
    return sorted(n for n in paths if not (root / "benchmarks" / "results" / n).is_file())
