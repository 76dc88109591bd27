"""The one object a surface asks: who is calling, and may it do this?

Every surface gets the daemon's one :class:`Access` and, per call or connection:

1. authenticates the caller into a :class:`~lkstream.security.principal.Principal`:
   a bearer token (gRPC ``authorization`` metadata, the HTTP ``Authorization``
   header) with :meth:`Access.authenticate_bearer`, or a SASL exchange (the Kafka
   listener) with a server from :meth:`Access.sasl`;
2. asks :meth:`Access.require` (raises
   :class:`~lkstream.errors.AuthorizationError`) or :meth:`Access.allows` (filters a
   listing) for each operation the call performs, then calls the broker.

``Access.disabled()`` (``server.auth: false``) authenticates everyone as
:data:`~lkstream.security.principal.ANONYMOUS` and allows everything.
:meth:`Access.from_files` (``server.auth: true``) reads the users and ACL files,
re-reading each when it changes (:class:`~lkstream.security.watched.WatchedFile`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from lkstream.errors import AuthenticationError, AuthorizationError
from lkstream.security.acl import Operation, ResourceType
from lkstream.security.authorizer import AclAuthorizer, AclIndex, AllowAll, Authorizer
from lkstream.security.credentials import UserDirectory
from lkstream.security.failures import FailureBudget
from lkstream.security.principal import ANONYMOUS, Principal
from lkstream.security.sasl import MECHANISMS, SaslServerFactory
from lkstream.security.watched import WatchedFile

BEARER: Final = "bearer"
#: gRPC metadata key and HTTP header (case-insensitive there) that carry the bearer token.
AUTHORIZATION_KEY: Final = "authorization"


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value (None when absent or another scheme)."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == BEARER and token else None


class Access:
    """Authentication and authorization for every surface of one daemon. Thread-safe."""

    def __init__(
        self,
        *,
        enabled: bool,
        users: Callable[[], UserDirectory],
        authorizer: Authorizer,
        version: Callable[[], int] = lambda: 0,
        files: Sequence[WatchedFile[Any]] = (),
    ) -> None:
        self.enabled = enabled
        self._users = users
        self.authorizer = authorizer
        self._version = version
        self._files = tuple(files)
        #: Failed authentications per user and per address, for every surface (passwords and tokens).
        self.failures = FailureBudget()

    @classmethod
    def disabled(cls) -> Access:
        """No authentication: every caller is ANONYMOUS and may do anything."""
        return cls(enabled=False, users=UserDirectory.empty, authorizer=AllowAll())

    @classmethod
    def from_files(
        cls, users_file: str, acl_file: str, super_users: Iterable[str] = (), *, check_interval_s: float = 1.0
    ) -> Access:
        """Authentication on, default deny: users and ACLs from these files, re-read when they change.

        Raises :class:`~lkstream.errors.InvalidArgumentError` naming a file that does not parse.
        """
        users = WatchedFile(users_file, UserDirectory.parse, UserDirectory.empty, check_interval_s=check_interval_s)
        acls = WatchedFile(acl_file, AclIndex.parse, AclIndex.empty, check_interval_s=check_interval_s)

        def version() -> int:
            acls.current()  # look at the file first (at most one stat per interval)
            return acls.version

        return cls(
            enabled=True,
            users=users.current,
            authorizer=AclAuthorizer(acls.current, super_users),
            version=version,
            files=(users, acls),
        )

    def reload(self) -> None:
        """Look at the users and ACL files now rather than within the interval (SIGHUP)."""
        for watched in self._files:
            watched.check_now()

    def acl_version(self) -> int:
        """A number that moves whenever the ACLs in force change (for caches of filtered answers)."""
        return self._version()

    # -- authentication ----------------------------------------------------------------------------

    def authenticate_bearer(self, header: str | None, address: str | None = None) -> Principal:
        """The principal of an ``Authorization`` value; raises :class:`AuthenticationError`.

        With ``address`` (the caller's IP), a wrong token counts against that address's failure
        budget (:attr:`failures`), which then refuses that address's password logins. A token is
        never refused by the budget: 256 random bits cannot be guessed, and refusing a valid one
        would only lock its owner out. With authentication off every caller is ANONYMOUS.
        """
        if not self.enabled:
            return ANONYMOUS
        token = bearer_token(header)
        if token is None:
            raise AuthenticationError("authentication required: send 'authorization: Bearer <token>'")
        principal = self._users().verify_token(token)
        if principal is None:
            self.failures.failed(address=address)
            raise AuthenticationError("authentication failed: unknown or revoked token")
        return principal

    def sasl(self, mechanisms: Sequence[str] = MECHANISMS) -> SaslServerFactory:
        """A factory of SASL servers over the users file (offer PLAIN only over TLS), counting failures
        in :attr:`failures`."""
        return SaslServerFactory(self._users, mechanisms, self.failures)

    # -- authorization -------------------------------------------------------------------------------

    def allows(self, principal: Principal, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        return self.authorizer.authorize(principal, operation, resource_type, name)

    def allows_any(self, principal: Principal, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether ``principal`` may do ``operation`` on at least one resource of ``resource_type``."""
        return self.authorizer.authorize_any(principal, operation, resource_type)

    def require(self, principal: Principal, operation: Operation, resource_type: ResourceType, name: str) -> None:
        """Raise :class:`AuthorizationError` naming what is missing unless ``principal`` may do it."""
        if not self.authorizer.authorize(principal, operation, resource_type, name):
            raise AuthorizationError(principal.name, operation.value, resource_type.value, name)

    @staticmethod
    def owner(principal: Principal) -> str | None:
        """The name that owns what ``principal`` creates (group member ids); None for ANONYMOUS (auth off)."""
        return None if principal.anonymous else principal.name

    def is_super_user(self, principal: Principal) -> bool:
        """Whether ``principal`` may do everything (always, with authentication off)."""
        if not self.enabled:
            return True
        return isinstance(self.authorizer, AclAuthorizer) and principal.name in self.authorizer.super_users
