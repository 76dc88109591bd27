"""Who is calling: a :class:`Principal` is what every surface turns its caller into.

A surface (gRPC, HTTP, the Kafka listener) authenticates its caller, with a bearer
token or a SASL exchange, into a principal and asks the one
:class:`~lkstream.security.authorizer.Authorizer` what that principal may do. ACL
entries name principals by user name (``alice``) or ``*`` (any authenticated
principal). The embedded API has no principal: it is the owner's own process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from lkstream.errors import InvalidArgumentError

#: ACL entries for this principal name apply to every authenticated principal.
ANY_PRINCIPAL: Final = "*"
#: The name of the principal of a caller that presented no credentials (auth off only).
ANONYMOUS_NAME: Final = "ANONYMOUS"

# Letters, digits and ._@+- ; no '*', ':' (Kafka's "User:" prefix), whitespace or control characters.
_USER_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,254}")


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: its user ``name`` and ``mechanism``, how it proved it.

    ``mechanism`` is ``token`` (a bearer token), ``PLAIN``, ``SCRAM-SHA-256``,
    ``SCRAM-SHA-512``, or ``none`` for :data:`ANONYMOUS`.
    """

    name: str
    mechanism: str

    @property
    def anonymous(self) -> bool:
        return self.mechanism == "none"

    def __str__(self) -> str:
        return self.name


#: The caller of a surface that does not authenticate (``auth: false``).
ANONYMOUS: Final = Principal(ANONYMOUS_NAME, "none")


def validate_user_name(name: object) -> str:
    """A user name: 1-255 of ``[A-Za-z0-9._@+-]``, starting with a letter or digit, not ``ANONYMOUS``."""
    if not isinstance(name, str) or not _USER_NAME.fullmatch(name) or name == ANONYMOUS_NAME:
        raise InvalidArgumentError(
            f"invalid user name {name!r}: use 1-255 characters from [A-Za-z0-9._@+-], starting with a letter "
            f"or digit (and not {ANONYMOUS_NAME})"
        )
    return name


def validate_principal_name(name: object) -> str:
    """A principal named in an ACL entry or the super-user list: a user name or ``*``."""
    if name == ANY_PRINCIPAL:
        return ANY_PRINCIPAL
    return validate_user_name(name)


def requester_of(principal: Principal, address: str | None) -> str:
    """Who a request comes from, for the budgets kept per caller (auto-creating topics).

    The principal when the caller authenticated; otherwise (authentication off) its client
    address, so every client of one host counts as one caller.
    """
    if not principal.anonymous:
        return f"principal {principal.name}"
    return f"address {address or 'unknown'}"
