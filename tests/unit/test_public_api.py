"""lkstream/__init__.py: a small, sorted, importable public surface."""

from __future__ import annotations

import importlib

import lkstream


def test_all_is_sorted_and_has_no_duplicates() -> None:
    assert lkstream.__all__ == sorted(lkstream.__all__)
    assert len(set(lkstream.__all__)) == len(lkstream.__all__)


def test_every_name_in_all_is_importable() -> None:
    module = importlib.import_module("lkstream")
    missing = [name for name in lkstream.__all__ if not hasattr(module, name)]
    assert missing == []
    namespace: dict[str, object] = {}
    exec("from lkstream import *", namespace)
    assert set(lkstream.__all__) <= set(namespace)


def test_every_public_error_is_an_lkstream_error() -> None:
    errors = [getattr(lkstream, n) for n in lkstream.__all__ if n.endswith("Error")]
    assert errors
    assert all(issubclass(e, lkstream.LkstreamError) for e in errors)


def test_version_is_a_string() -> None:
    assert isinstance(lkstream.__version__, str)
    assert lkstream.__version__.count(".") == 2


def test_the_seed_example_names_are_exported() -> None:
    for name in ("Broker", "Consumer", "OffsetStore", "Record", "Partition", "Compression"):
        assert name in lkstream.__all__


def test_import_lkstream_does_not_load_the_kafka_protocol_schemas() -> None:
    # kio's schemas take seconds to import; embedded users must not pay for the Kafka listener.
    import subprocess
    import sys

    code = "import sys, lkstream; print('kio' in sys.modules, 'lkstream.kafka' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.split() == ["False", "False"]
    assert callable(lkstream.kafka_server)  # loaded on first use
