"""The generated tables of docs/benchmarks.md (benchmarks/report/): the page cannot drift from its results.

Every table between ``<!-- table NAME: FILES -->`` and ``<!-- /table -->`` must be exactly what
``python -m benchmarks.report`` renders from the files it cites; benchmarks/results/ holds exactly
the result files the docs cite (git keeps the older runs).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.report import page
from benchmarks.report.__main__ import main
from benchmarks.report.tables import TABLES

REPO = Path(__file__).resolve().parents[2]


def test_every_table_of_the_benchmarks_page_is_what_its_result_files_give() -> None:
    text = page.PAGE.read_text()
    found = page.blocks(text)
    assert {b.name for b in found} == set(TABLES), "every renderer has its table in the page, and only those"
    for block in found:
        assert text[block.body_start : block.body_end] == page.render(block), (
            f"table {block.name!r} of docs/benchmarks.md differs from {' '.join(block.files)}:"
            " run `python -m benchmarks.report --write`"
        )


def test_the_results_folder_holds_exactly_what_the_docs_cite() -> None:
    assert page.missing() == [], "cited by a page but not in benchmarks/results/"
    assert page.uncited() == [], "in benchmarks/results/ but cited by no page: git rm it (git keeps old runs)"


def _tree(tmp_path: Path, body: str) -> Path:
    """A repository-shaped directory with one page and the result files the test page cites."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "README.md").write_text("")
    for name in ("quick-20261127T104040Z.json",):
        shutil.copy(REPO / "benchmarks" / "results" / name, tmp_path / "benchmarks" / "results" / name)
    (tmp_path / "docs" / "benchmarks.md").write_text(body)
    return tmp_path / "docs" / "benchmarks.md"


MARKED = (
    "# B\n\nhand-written text\n\n"
    "<!-- table embedded-api: benchmarks/results/quick-20261127T104040Z.json -->\nstale\n<!-- /table -->\n\nmore text\n"
)


def test_regenerate_replaces_only_the_text_between_the_markers(tmp_path: Path) -> None:
    path = _tree(tmp_path, MARKED)
    new = page.regenerate(path.read_text(), tmp_path)
    assert "stale" not in new
    assert new.startswith("# B\n\nhand-written text\n\n<!-- table embedded-api:") and new.endswith("more text\n")
    assert "| `Producer.send`, one record a call |" in new
    assert page.regenerate(new, tmp_path) == new  # a second pass changes nothing


def test_a_new_result_takes_the_place_of_every_result_of_its_kind(tmp_path: Path) -> None:
    path = _tree(tmp_path, MARKED)
    doc = json.loads((tmp_path / "benchmarks" / "results" / "quick-20261127T104040Z.json").read_text())
    doc["utc"] = "20261201T000000Z"
    newer = tmp_path / "benchmarks" / "results" / "quick-20261201T000000Z.json"
    newer.write_text(json.dumps(doc))
    moved = page.repoint(path.read_text(), "benchmarks/results/quick-20261201T000000Z.json")
    assert "quick-20261127T104040Z" not in moved and "quick-20261201T000000Z.json -->" in moved
    assert page.uncited(tmp_path) == ["quick-20261201T000000Z.json"]  # not cited before the page moves to it
    path.write_text(page.regenerate(moved, tmp_path))
    assert "2026-12-01 00:00 UTC" in path.read_text()
    assert page.uncited(tmp_path) == ["quick-20261127T104040Z.json"]  # the run it replaced: git rm it


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("<!-- table embedded-api: benchmarks/results/quick-20261127T104040Z.json -->\nno end\n", "no <!-- /table -->"),
        ("<!-- table no-such-table: benchmarks/results/quick-20261127T104040Z.json -->\n<!-- /table -->\n", "unknown"),
        ("<!-- table glance: benchmarks/results/quick-20261127T104040Z.json -->\n<!-- /table -->\n", "reads peers"),
        ("<!-- table embedded-api: benchmarks/results/quick-20991231T000000Z.json -->\n<!-- /table -->\n", "not in"),
    ],
)
def test_a_broken_marker_or_citation_is_an_error_naming_it(tmp_path: Path, body: str, error: str) -> None:
    path = _tree(tmp_path, body)
    with pytest.raises(page.PageError, match=error):
        page.regenerate(path.read_text(), tmp_path)


def test_check_fails_on_a_drifted_table_and_write_repairs_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _tree(tmp_path, MARKED)
    assert main(["--page", str(path)]) == 1
    assert "tables differ" in capsys.readouterr().err
    assert main(["--page", str(path), "--write"]) == 0
    assert main(["--page", str(path)]) == 0


def test_citations_count_paths_and_stamped_names_in_prose() -> None:
    texts = ["see `benchmarks/results/peers-20261128T045306Z.json`", "the run bench_spark-20261127T065336Z (load 2)"]
    assert page.cited(texts) == {"peers-20261128T045306Z", "bench_spark-20261127T065336Z"}
