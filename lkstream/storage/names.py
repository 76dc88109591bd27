"""Names that become file names: validated here, before they touch the filesystem."""

from __future__ import annotations

import re
from typing import Final

from lkstream.errors import InvalidArgumentError

MAX_NAME_LENGTH: Final = 249
_ALLOWED: Final = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_PARTITION_DIR: Final = re.compile(r"^part(0|[1-9]\d{0,8})$")


def validate_topic(name: object) -> str:
    """Kafka's topic rule: ``[A-Za-z0-9._-]{1,249}``, and never ``.`` or ``..``."""
    if not isinstance(name, str) or not _ALLOWED.match(name) or name in (".", ".."):
        raise InvalidArgumentError(
            f"invalid topic name {name!r}: use 1-249 characters from [A-Za-z0-9._-], not '.' or '..'"
        )
    return name


def validate_group(name: object) -> str:
    """Group ids follow the topic rule, may not contain ``__`` and may not end with ``_``.

    Offset files are named ``{group}__{topic}__part{pid}``: with those two rules
    the first ``__`` in a file name always ends the group id, so no two
    (group, topic) pairs share a file (``g_`` + ``x`` vs ``g`` + ``_x``).
    """
    if (
        not isinstance(name, str)
        or not _ALLOWED.match(name)
        or name in (".", "..")
        or "__" in name
        or name.endswith("_")
    ):
        raise InvalidArgumentError(
            f"invalid group id {name!r}: use 1-249 characters from [A-Za-z0-9._-], "
            "not '.' or '..', no '__' and no trailing '_'"
        )
    return name


def partition_dir_name(partition: int) -> str:
    return f"part{partition}"


def parse_partition_dir(name: str) -> int | None:
    match = _PARTITION_DIR.match(name)
    return int(match.group(1)) if match else None
