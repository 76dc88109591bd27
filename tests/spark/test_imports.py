"""What each Python process Spark starts for the format imports (issue 14, row 8).

Spark unpickles the data source, a reader or a writer in a fresh Python process per planner
and worker; the imports are paid there, before any row moves (docs/benchmarks-notes.md, "Imports").
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: Modules a read task of ``path`` must never load: the embedded broker, the gRPC client, the
#: sink and the security package (0.3-0.5 s of imports in each worker).
NOT_FOR_A_PATH_READ = ("lkstream.broker", "lkstream.client", "grpc", "lkstream.spark.sink", "lkstream.security")


def loaded_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint('\\n'.join(sys.modules))\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    return set(done.stdout.split())


def loaded_under(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_the_package_loads_neither_the_source_nor_the_sink() -> None:
    modules = loaded_after("import lkstream.spark")
    assert loaded_under(modules, ("lkstream.spark.source", "lkstream.spark.sink", "lkstream.broker")) == []


def test_a_path_read_task_loads_only_the_reader_side(tmp_path: Path) -> None:
    (tmp_path / "topics").mkdir()  # an empty data directory
    modules = loaded_after(
        "from lkstream.spark.access import open_view\n"
        "from lkstream.spark.options import parse_source_options\n"
        f"opts = parse_source_options({{'path': {str(tmp_path)!r}, 'subscribe': 't'}}, streaming=False)\n"
        "open_view(opts.access).close()\n"
    )
    assert "lkstream.storage.reader" in modules
    assert loaded_under(modules, NOT_FOR_A_PATH_READ) == []


@pytest.mark.parametrize("name", ["DataLossError", "OffsetRange"])
def test_the_source_names_of_the_package_load_on_use(name: str) -> None:
    import lkstream.spark
    import lkstream.spark.source

    assert getattr(lkstream.spark, name) is getattr(lkstream.spark.source, name)


def test_an_unknown_name_of_the_package_is_an_attribute_error() -> None:
    import lkstream.spark

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        lkstream.spark.nope  # noqa: B018
