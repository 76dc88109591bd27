"""lkstream.errors: one hierarchy, fields on every error, OSError mapped at the boundary."""

from __future__ import annotations

import errno
import os

import pytest

from lkstream import errors as E


def test_hierarchy_matches_the_documented_tree() -> None:
    assert issubclass(E.RecordTooLargeError, E.InvalidArgumentError)
    assert issubclass(E.InvalidArgumentError, ValueError)
    assert issubclass(E.DiskFullError, E.StorageError)
    for cls in (
        E.UnknownTopicError,
        E.TopicExistsError,
        E.OffsetOutOfRangeError,
        E.CorruptRecordError,
        E.BackpressureError,
        E.StorageError,
        E.DataDirLockedError,
        E.BrokerClosedError,
    ):
        assert issubclass(cls, E.LkstreamError)
    assert not issubclass(E.InvariantViolation, E.LkstreamError)
    assert issubclass(E.InvariantViolation, AssertionError)


def test_only_backpressure_and_disk_full_are_retriable() -> None:
    assert E.BackpressureError(10, 5).retriable is True
    assert E.DiskFullError("full").retriable is True
    assert E.CorruptRecordError("x").retriable is False
    assert E.InvalidArgumentError("x").retriable is False


def test_invariant_raises_even_under_python_O() -> None:
    E.invariant(True, "fine")
    with pytest.raises(E.InvariantViolation, match="broken"):
        E.invariant(False, "broken")


def test_map_os_errors_turns_enospc_into_disk_full_with_the_path() -> None:
    with pytest.raises(E.DiskFullError) as info, E.map_os_errors("append", "/d/0.seg"):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert info.value.path == "/d/0.seg"
    assert info.value.errno == errno.ENOSPC
    assert "/d/0.seg" in str(info.value)


def test_map_os_errors_turns_other_os_errors_into_storage_error() -> None:
    with pytest.raises(E.StorageError) as info, E.map_os_errors("read", "/d/x"):
        raise OSError(errno.EIO, "Input/output error")
    assert type(info.value) is E.StorageError
    assert str(info.value) == "cannot read (Input/output error): /d/x"


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES, errno.EPERM])
def test_map_os_errors_names_a_directory_that_is_not_writable(code: int) -> None:
    """Issue 12, finding 1: a read-only disk is a clear, non-internal error with the path."""
    with pytest.raises(E.StorageAccessError) as info, E.map_os_errors("delete topic", "/d/topics/t"):
        raise OSError(code, os.strerror(code))
    assert info.value.path == "/d/topics/t" and info.value.errno == code
    assert "not writable" in str(info.value) and "/d/topics/t" in str(info.value)


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE])
def test_map_os_errors_names_the_descriptor_limit(code: int) -> None:
    """Issue 12, finding 1: EMFILE is RESOURCE_EXHAUSTED naming RLIMIT_NOFILE, never INTERNAL."""
    import resource

    from lkstream.wire.contract import status_for

    with pytest.raises(E.TooManyOpenFilesError) as info, E.map_os_errors("open", "/d/x.seg"):
        raise OSError(code, os.strerror(code))
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert info.value.limit == limit and f"RLIMIT_NOFILE is {limit}" in str(info.value)
    assert info.value.retriable
    assert status_for(info.value).name == "RESOURCE_EXHAUSTED"
    assert status_for(E.StorageAccessError("x", path="/d")).name == "FAILED_PRECONDITION"


def test_map_os_errors_lets_other_exceptions_through() -> None:
    with pytest.raises(KeyError), E.map_os_errors("read", "/d/x"):
        raise KeyError("k")


def test_offset_out_of_range_carries_its_bounds() -> None:
    err = E.OffsetOutOfRangeError("t", 2, 5, 10, 20)
    assert (err.topic, err.partition, err.offset, err.earliest, err.latest) == ("t", 2, 5, 10, 20)
    assert str(err) == "offset 5 is out of range for t[2]: earliest is 10, latest is 20"
