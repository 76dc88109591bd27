"""The C extensions the Spark connector uses, when ``pip install`` could build them."""

from __future__ import annotations

import importlib
from typing import Any


def native(module: str) -> Any:
    """``lkstream.format.<module>``, or None when it was not built (the callers fall back to Python)."""
    try:
        return importlib.import_module(f"lkstream.format.{module}")
    except ImportError:  # pragma: no cover - built by pip install; tests/spark check that it is
        return None
