"""Names that become file names, keys or metric labels: validated here, before they are used.

Topics follow Kafka's topic rule and become directory names as they are. Group ids follow
Kafka's rule (any non-empty string) and never become a path or a label raw: see
:func:`validate_group`.

Every rule is a *full* match (:meth:`re.Pattern.fullmatch`): ``re.match(r"^...$")``
would accept a trailing newline, because ``$`` also matches just before one, and
``orders\\n`` would then coexist with ``orders`` (issue 12, finding 11).
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from lkstream.errors import InvalidArgumentError

MAX_NAME_LENGTH: Final = 249
#: Kafka's protocol carries a group id as a STRING (int16 length): at most 32767 bytes.
MAX_GROUP_ID_BYTES: Final = 32767
_LABEL_PREFIX: Final = 64  # characters of an unusual group id kept readable in its metric label
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
    """Kafka's rule for group ids: any non-empty string (at most :data:`MAX_GROUP_ID_BYTES` in UTF-8).

    A group id is never used raw where it could do harm: offset files of ids outside
    :func:`is_plain_group` are named by a hash (:mod:`lkstream.storage.offset_files`),
    metric labels go through :func:`group_label`, messages through :func:`shown`.
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"invalid group id {shown(name)}: use a non-empty string")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            f"invalid group id {shown(name)}: not valid Unicode (lone surrogate); no Kafka client can send it"
        ) from None
    if size > MAX_GROUP_ID_BYTES:
        raise InvalidArgumentError(
            f"invalid group id {shown(name)}: {size} bytes in UTF-8, "
            f"at most {MAX_GROUP_ID_BYTES} (Kafka's string limit)"
        )
    return name


def escaped(name: str) -> str:
    """``name`` for a terminal or a log line: printable characters as they are, the others escaped
    (``\\x1b``, ``\\n``), so a group id cannot move the cursor or forge a line of output."""
    if name.isprintable():
        return name
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode() for c in name)


def is_plain_group(name: str) -> bool:
    """Whether ``name`` follows the rule group ids had before issue 24 (the topic rule, no ``__``, no
    trailing ``_``): such ids keep their readable offset file names, ``{group}__{topic}__part{pid}``.

    With those two extra rules the first ``__`` of a file name always ends the group id, so no two
    (group, topic) pairs share a file (``g_`` + ``x`` vs ``g`` + ``_x``).
    """
    return _is_name(name) and "__" not in name and not name.endswith("_")


def group_label(name: str) -> str:
    """``name`` as a metric label value: as is when printable and at most 249 characters, else a
    printable, bounded form that stays distinct (``repr``-escaped prefix and a hash of the whole id)."""
    if len(name) <= MAX_NAME_LENGTH and name.isprintable():
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{ascii(name)[1:-1][:_LABEL_PREFIX]}~{digest}"


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
