"""Names that become file names, keys or metric labels: validated here, before they are used.

Every rule is a *full* match (:meth:`re.Pattern.fullmatch`): ``re.match(r"^...$")``
would accept a trailing newline, because ``$`` also matches just before one, and
``orders\\n`` would then coexist with ``orders`` (issue 12, finding 11).
"""

from __future__ import annotations

import re
from typing import Final

from lkstream.errors import InvalidArgumentError

MAX_NAME_LENGTH: Final = 249
#: Kafka's ``client.id`` may be any string; ours is bounded because it is shown and stored.
MAX_CLIENT_ID_LENGTH: Final = 255
_ALLOWED: Final = re.compile(r"[A-Za-z0-9._-]{1,249}")
_PARTITION_DIR: Final = re.compile(r"part(0|[1-9]\d{0,8})")
# Printable ASCII (space to tilde): no control characters, nothing a terminal or a log would mangle.
_CLIENT_ID: Final = re.compile(r"[ -~]{0,255}")


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to about ``limit`` characters: error messages never echo unbounded input.

    A rejected name travels back in the error (gRPC status message, HTTP body, logs); a
    16 KB name would otherwise overflow the peer's header limit and hide the real error.
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, (str, bytes)) else ""
    return f"{text[:limit]}...{size}"


def _is_name(name: object) -> bool:
    return isinstance(name, str) and _ALLOWED.fullmatch(name) is not None and name not in (".", "..")


def _require_name(name: object, what: str) -> str:
    """``name`` if it follows the topic rule, else :class:`InvalidArgumentError` saying it is an invalid ``what``."""
    if not _is_name(name):
        raise InvalidArgumentError(
            f"invalid {what} {shown(name)}: use 1-249 characters from [A-Za-z0-9._-], not '.' or '..'"
        )
    assert isinstance(name, str)
    return name


def validate_topic(name: object) -> str:
    """Kafka's topic rule: ``[A-Za-z0-9._-]{1,249}``, and never ``.`` or ``..``."""
    return _require_name(name, "topic name")


def validate_group(name: object) -> str:
    """Group ids follow the topic rule, may not contain ``__`` and may not end with ``_``.

    Offset files are named ``{group}__{topic}__part{pid}``: with those two rules
    the first ``__`` in a file name always ends the group id, so no two
    (group, topic) pairs share a file (``g_`` + ``x`` vs ``g`` + ``_x``).
    """
    if not _is_name(name) or not isinstance(name, str) or "__" in name or name.endswith("_"):
        raise InvalidArgumentError(
            f"invalid group id {shown(name)}: use 1-249 characters from [A-Za-z0-9._-], "
            "not '.' or '..', no '__' and no trailing '_'"
        )
    return name


def validate_instance_id(name: object) -> str:
    """A static member's ``instance_id``: the topic rule (Kafka's rule for ``group.instance.id``)."""
    return _require_name(name, "instance id")


def validate_client_id(name: object) -> str:
    """A client id (shown by DescribeGroup, part of generated member ids): printable ASCII, at most 255."""
    if not isinstance(name, str) or _CLIENT_ID.fullmatch(name) is None:
        raise InvalidArgumentError(
            f"invalid client id {shown(name)}: use at most {MAX_CLIENT_ID_LENGTH} printable ASCII characters"
        )
    return name


def validate_member_id(name: object) -> str:
    """A member id as the coordinator makes them (``{client id}-{uuid hex}``): 1-255 printable ASCII."""
    if not isinstance(name, str) or not name or _CLIENT_ID.fullmatch(name) is None:
        raise InvalidArgumentError(f"invalid member id {shown(name)}: use 1-255 printable ASCII characters")
    return name


def partition_dir_name(partition: int) -> str:
    return f"part{partition}"


def parse_partition_dir(name: str) -> int | None:
    match = _PARTITION_DIR.fullmatch(name)
    return int(match.group(1)) if match else None
