"""lkstream/__init__.py: a small, sorted, importable public surface."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

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


def test_importing_lkstream_leaves_the_network_surfaces_unloaded() -> None:
    """An embedding process pays only for what it uses (issue 14: memory and full-GC pauses)."""
    code = (
        "import sys, lkstream\n"
        "heavy = [m for m in ('grpc', 'google.protobuf', 'kio', 'aiohttp', 'aiokafka', 'scramp') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
        "lkstream.connect, lkstream.kafka_server, lkstream.ClientTls, lkstream.RemoteBroker\n"
        "print('grpc' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    unloaded, loaded_on_use = done.stdout.splitlines()
    assert unloaded == ""
    assert loaded_on_use == "True"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        lkstream.nope  # noqa: B018


def test_importing_lkstream_loads_only_the_errors_until_a_name_is_used() -> None:
    """Spark starts a Python process per planner and worker; each pays only for what it touches."""
    code = (
        "import sys, lkstream\n"
        "print(','.join(sorted(m for m in sys.modules if m.startswith('lkstream'))))\n"
        "lkstream.Broker, lkstream.OffsetStore, lkstream.Record\n"
        "print('lkstream.broker.broker' in sys.modules, 'lkstream.storage.offsets' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    loaded, loaded_on_use = done.stdout.splitlines()
    assert loaded == "lkstream,lkstream.errors"
    assert loaded_on_use == "True True"


def test_dir_lists_the_lazy_names() -> None:
    assert set(lkstream.__all__) <= set(dir(lkstream))
