"""A budget of failed authentications per user and per address, shared by every surface (issue 28, finding 14).

Kafka's SASL refusals were paced per connection only (100 ms, one attempt per connection): 32
parallel connections made about 300 password guesses a second. :class:`FailureBudget` keeps a
token bucket per user name and per peer address: each failed authentication takes a token, and
tokens come back at a fixed rate. An attempt whose user or address has no token left is refused
before any credential is looked at (no key derivation is spent on it either), with a message
saying when to retry. A success takes nothing.

Every surface reports to the daemon's one budget (:attr:`lkstream.security.access.Access.failures`):
the Kafka listener's password exchanges (PLAIN, SCRAM: user and address, refused when either is
spent) and the refused tokens of every surface (gRPC and HTTP bearer tokens, Kafka's
OAUTHBEARER: counted against the address). A token is never refused by the budget: 256 random
bits cannot be guessed, so a valid one proves possession, and refusing it would lock its owner
out because someone else at the same address (a NAT, a shared host) sent bad ones; an address
that sprays bad tokens loses its password attempts instead.

The trade-off, accepted: someone who fails as ``alice`` from many addresses empties ``alice``'s
bucket, and ``alice`` herself is then refused until it refills (seconds, at the default rate),
as with any per-account lockout; the alternative, a budget per user and address only, lets a
botnet guess at its own size times the rate.

Memory is bounded: only keys with failures are kept, a key whose bucket refilled is dropped
when next met, and beyond :data:`MAX_KEYS` the least recently failed ones are forgotten (which
gives them a full bucket back: a flood of names cannot grow the table). Thread-safe.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from lkstream.errors import AuthenticationError

#: Keys (user names and addresses) tracked at once.
MAX_KEYS: Final = 10_000


@dataclass(frozen=True)
class Rate:
    """``burst`` failures at once, then one more every ``1 / per_second`` seconds."""

    burst: int
    per_second: float


#: Failures one address may make: 20 at once, then one a second.
ADDRESS_RATE: Final = Rate(burst=20, per_second=1.0)
#: Failures against one user name, from anywhere: 10 at once, then one every 5 s.
USER_RATE: Final = Rate(burst=10, per_second=0.2)


class TooManyFailures(AuthenticationError):
    """An authentication refused unchecked: its user or address failed too often lately."""

    def __init__(self, what: str, retry_after_s: float) -> None:
        super().__init__(
            f"authentication failed: too many failed attempts for this {what}; retry in {math.ceil(retry_after_s)} s"
        )
        self.retry_after_s = retry_after_s


class _Buckets:
    """Token buckets of one kind of key (caller holds the budget's lock)."""

    def __init__(self, rate: Rate, clock: Callable[[], float]) -> None:
        self.rate = rate
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, as of)

    def _tokens(self, key: str) -> float:
        found = self._buckets.get(key)
        if found is None:
            return float(self.rate.burst)
        tokens, since = found
        tokens = min(float(self.rate.burst), tokens + (self._clock() - since) * self.rate.per_second)
        if tokens >= self.rate.burst:
            del self._buckets[key]  # refilled: nothing to remember
        return tokens

    def wait_s(self, key: str) -> float:
        """Seconds until ``key`` has a token again (0: it has one now)."""
        tokens = self._tokens(key)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate.per_second

    def take(self, key: str) -> None:
        self._buckets[key] = (max(0.0, self._tokens(key) - 1.0), self._clock())
        self._buckets.move_to_end(key)
        while len(self._buckets) > MAX_KEYS:
            self._buckets.popitem(last=False)

    def give_back(self, key: str) -> None:
        if key in self._buckets:
            self._buckets[key] = (self._tokens(key) + 1.0, self._clock())
            self._tokens(key)  # forgets the key if that refilled it

    def __len__(self) -> int:
        return len(self._buckets)


class FailureBudget:
    """Failed authentications per user and per address (see the module docstring). Thread-safe."""

    def __init__(
        self,
        user_rate: Rate = USER_RATE,
        address_rate: Rate = ADDRESS_RATE,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = threading.Lock()
        self._users = _Buckets(user_rate, clock)
        self._addresses = _Buckets(address_rate, clock)
        #: Attempts refused unchecked (a budget was empty).
        self.refused = 0

    def check(self, *, user: str | None = None, address: str | None = None) -> None:
        """Raise :class:`TooManyFailures` if ``user`` or ``address`` has no failure left to spend."""
        with self._lock:
            self._check_locked(user, address)

    def failed(self, *, user: str | None = None, address: str | None = None) -> None:
        """Count one failed authentication against ``user`` and ``address``."""
        with self._lock:
            self._take_locked(user, address)

    def attempt(self, *, user: str | None = None, address: str | None = None) -> None:
        """Start an authentication that spans several steps (a SASL exchange): it counts as failed
        until :meth:`succeeded`, so parallel exchanges cannot all pass the check before the first
        one fails. Raises :class:`TooManyFailures` (nothing taken) if a budget is spent."""
        with self._lock:
            self._check_locked(user, address)
            self._take_locked(user, address)

    def succeeded(self, *, user: str | None = None, address: str | None = None) -> None:
        """The authentication :meth:`attempt` started succeeded: what it took goes back."""
        with self._lock:
            if user:
                self._users.give_back(user)
            if address:
                self._addresses.give_back(address)

    def _check_locked(self, user: str | None, address: str | None) -> None:
        for what, buckets, key in (("address", self._addresses, address), ("user", self._users, user)):
            if key:
                wait = buckets.wait_s(key)
                if wait > 0:
                    self.refused += 1
                    raise TooManyFailures(what, wait)

    def _take_locked(self, user: str | None, address: str | None) -> None:
        if user:
            self._users.take(user)
        if address:
            self._addresses.take(address)

    def tracked(self) -> int:
        """Keys remembered (users and addresses with recent failures)."""
        with self._lock:
            return len(self._users) + len(self._addresses)
