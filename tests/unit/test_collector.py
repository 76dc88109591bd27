"""The daemon's start-up heap is frozen out of the collector's walks (issue 12, finding 9)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from lkstream.server.collector import freeze_start_up_heap


@pytest.fixture
def unfreeze() -> Iterator[None]:
    yield
    gc.unfreeze()  # the test process's objects go back to the collector


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


@pytest.mark.usefixtures("unfreeze")
def test_objects_alive_at_start_up_leave_the_walks_and_later_ones_stay_in_them() -> None:
    before = _Node()
    frozen = freeze_start_up_heap()
    # At most what it froze: a frozen object freed meanwhile (by another thread of the test process,
    # such as a client's left over from an earlier test) leaves the permanent generation.
    assert 0 < gc.get_freeze_count() <= frozen
    after = _Node()
    walked = {id(o) for o in gc.get_objects()}
    assert id(before) not in walked, "an object alive at start-up must not be walked again"
    assert id(after) in walked, "objects made later are collected as usual"


@pytest.mark.usefixtures("unfreeze")
def test_garbage_from_before_the_freeze_is_collected_first() -> None:
    """The freeze collects first: cyclic garbage dropped before it is freed, not frozen forever."""
    node = _Node()
    ref = weakref.ref(node)
    del node
    freeze_start_up_heap()
    assert ref() is None
