"""Batch reads of a data directory by a reader inside Spark's JVM: ``read_path(spark, path, ...)``.

The Python source (``spark.read.format("lkstream").option("path", ...)``) decodes
in Python workers and hands Spark Arrow batches over a socket; turning those into
rows costs the JVM more than Spark's whole Parquet read (docs/benchmarks-notes.md,
"Where the CPU goes"). Here planning stays in Python, with the same options and the
same :class:`~lkstream.spark.source.Planner`, and the planned ``[start, end)``
ranges go to ``io.lkstream.spark.RangeSource``, a Spark DataSource V2 in Java
(sources in ``lkstream/spark/java/``) that reads the segment files itself and
returns columnar batches. Both return the same DataFrame.

The jar is compiled on first use by :func:`jar_path` (``javac`` against PySpark's
own jars) into ``$XDG_CACHE_HOME/lkstream`` (``~/.cache/lkstream``), named by a
hash of the sources and the PySpark version; the session must be built with it::

    spark = SparkSession.builder.config("spark.jars", lkstream.spark.jvm.jar_path()).getOrCreate()

``python -m lkstream.spark.jvm`` builds it and prints its path.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Final

from lkstream.errors import InvalidArgumentError, LkstreamError
from lkstream.spark.options import parse_source_options
from lkstream.spark.source import OffsetRange, plan_batch

#: The Java sources shipped in the package (pyproject.toml's package-data lists them).
JAVA_SOURCES: Final = Path(__file__).parent / "java"
SOURCE_CLASS: Final = "io.lkstream.spark.RangeSource"
_JAVAC_TIMEOUT_S: Final = 300.0


class JvmReaderError(LkstreamError):
    """The JVM reader cannot be built (no ``javac``) or is not on the Spark session's classpath."""


def _pyspark() -> tuple[str, Path]:
    import pyspark

    return pyspark.__version__, Path(pyspark.__file__).parent / "jars"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lkstream"


def _sources() -> list[Path]:
    return sorted(JAVA_SOURCES.rglob("*.java"))


def _jar_name(version: str) -> str:
    digest = hashlib.sha256(f"pyspark {version}\n".encode())
    for source in _sources():
        digest.update(str(source.relative_to(JAVA_SOURCES)).encode() + b"\0" + source.read_bytes() + b"\0")
    return f"lkstream-spark-{digest.hexdigest()[:16]}.jar"


def _javac() -> str:
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "javac") if home and os.path.exists(os.path.join(home, "bin", "javac")) else None
    found = found or shutil.which("javac")
    if found is None:
        raise JvmReaderError(
            "the JVM reader is compiled on first use and needs javac, a Java Development Kit (17 or newer): "
            "install one (e.g. apt-get install openjdk-17-jdk-headless) or set JAVA_HOME to it"
        )
    return found


def jar_path() -> str:
    """The path of the reader's jar, compiled now if this version of the sources has no jar yet.

    Safe when several processes ask at once: one compiles under a lock file, the others
    wait and find the jar; a jar appears only whole (built aside, then renamed).
    """
    version, jars = _pyspark()
    cache = _cache_dir()
    jar = cache / _jar_name(version)
    if jar.exists():
        return str(jar)
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not jar.exists():
            _build(jar, jars)
    return str(jar)


def _build(jar: Path, pyspark_jars: Path) -> None:
    javac = _javac()
    with tempfile.TemporaryDirectory(dir=jar.parent, prefix=".build-") as tmp:
        classes = Path(tmp) / "classes"
        command = [javac, "--release", "17", "-nowarn", "-cp", f"{pyspark_jars}/*", "-d", str(classes)]
        try:
            done = subprocess.run(
                [*command, *map(str, _sources())],
                capture_output=True,
                text=True,
                timeout=_JAVAC_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise JvmReaderError(f"javac did not run: {exc}") from None
        if done.returncode != 0:
            raise JvmReaderError(f"javac failed to compile the JVM reader:\n{done.stdout}{done.stderr}")
        built = Path(tmp) / jar.name
        with zipfile.ZipFile(built, "w", zipfile.ZIP_DEFLATED) as out:
            out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: lkstream\n")
            for path in sorted(classes.rglob("*.class")):
                out.write(path, path.relative_to(classes).as_posix())
        os.replace(built, jar)


def ranges_json(path: str, tasks: list[OffsetRange]) -> str:
    """The ``ranges`` option of ``RangeSource``: one object per task, in the planner's order."""
    from lkstream.storage.reader import DataDirReader

    reader = DataDirReader(path)
    return json.dumps(
        [
            {
                "dir": reader.partition_dir(task.topic, task.partition),
                "topic": task.topic,
                "partition": task.partition,
                "start": task.start,
                "end": task.end,
                "failOnDataLoss": task.fail_on_data_loss,
            }
            for task in tasks
        ]
    )


def plan(path: str, options: dict[str, str]) -> tuple[list[OffsetRange], bool]:
    """The tasks of a batch read of ``path`` and whether the headers column is wanted.

    The options are the Python source's, parsed and planned exactly as its batch reader
    does (:class:`~lkstream.spark.source.BatchReader`).
    """
    if any(name.lower() in ("bootstrap", "path") for name in options):
        raise InvalidArgumentError(
            "read_path reads the data directory given as its path argument: options bootstrap and path are not "
            "taken (read a daemon with spark.read.format('lkstream').option('bootstrap', ...))"
        )
    parsed = parse_source_options({**options, "path": path}, streaming=False)
    return plan_batch(parsed), parsed.include_headers


def read_path(spark: Any, path: str, **options: str) -> Any:
    """A DataFrame of the records of data directory ``path``, read by the JVM reader.

    Takes the options of ``spark.read.format("lkstream")`` but ``bootstrap`` and ``path``
    (``subscribe``, ``startingOffsets``, ``minPartitions``, ``includeHeaders``, ...) and
    returns what that source returns for ``option("path", path)``: the same schema, and
    the same rows in the same order within each partition. The session must have the
    jar (:func:`jar_path`) on its classpath.
    """
    _check_loadable(spark)
    tasks, include_headers = plan(path, {k: str(v) for k, v in options.items()})
    return (
        spark.read.format(SOURCE_CLASS)
        .option("ranges", ranges_json(path, tasks))
        .option("includeHeaders", str(include_headers).lower())
        .load()
    )


def _check_loadable(spark: Any) -> None:
    """Fail here, with what to do, when the session cannot load the reader (checked where PySpark exposes its JVM)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(SOURCE_CLASS, False, loader)
    except Exception as exc:
        if "ClassNotFoundException" not in str(exc):
            raise
        raise JvmReaderError(
            f"the Spark session cannot load {SOURCE_CLASS}: build the session with the JVM reader's jar, "
            "SparkSession.builder.config('spark.jars', lkstream.spark.jvm.jar_path()) (a session already "
            "started keeps its classpath; start a new JVM)"
        ) from None


def main() -> None:
    """``python -m lkstream.spark.jvm``: build the jar if needed and print its path."""
    try:
        print(jar_path())
    except JvmReaderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
