"""What ``/metrics`` shows a scraper when authentication is on (issue 28, finding 13).

Every other surface hides topic and group names from callers without ``describe`` on them; the
open ``/metrics`` named them all to anyone who could reach the HTTP port. With ``server.auth``
on, each scrape now sees:

* without credentials: every family, but no series labelled with a ``topic`` or a ``group``
  (process, admission, latency, fsync, error counts, disk: what an anonymous health check
  needs);
* with ``Authorization: Bearer <token>``: also the series whose topic and group the token's
  principal may ``describe`` (a super user: all of them), asked of the same authorizer as
  every other surface, once per name and scrape;
* with a token that does not verify: 401, so a scraper with a revoked token is noticed rather
  than silently seeing less.

The same rule holds on the HTTP port and on the admin listener (one handler). With
authentication off everything is shown, as before: such a daemon listens on loopback only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from lkstream.security.access import Access
from lkstream.security.acl import Operation, ResourceType
from lkstream.security.principal import Principal

#: Labels whose values are names the ACLs protect, and the resource type each names.
NAMED_LABELS: Final = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP}

Visible = Callable[[str, str], bool]


class ScrapeView:
    """The families of ``registry`` with only the series ``visible(label, value)`` allows (a collector)."""

    def __init__(self, registry: CollectorRegistry, visible: Visible) -> None:
        self.registry = registry
        self.visible = visible

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            kept = [sample for sample in family.samples if self._shown(sample.labels)]
            if len(kept) == len(family.samples):
                yield family
                continue
            view = Metric(family.name, family.documentation, family.type, family.unit)
            view.samples = kept
            yield view

    def _shown(self, labels: dict[str, str]) -> bool:
        return all(self.visible(name, value) for name, value in labels.items() if name in NAMED_LABELS)


def visible_to(access: Access, principal: Principal | None) -> Visible:
    """What ``principal`` may see (None: an anonymous scraper sees no names); answers cached per name."""
    if principal is None:
        return lambda _label, _value: False
    seen: dict[tuple[str, str], bool] = {}

    def visible(label: str, value: str) -> bool:
        key = (label, value)
        allowed = seen.get(key)
        if allowed is None:
            allowed = seen[key] = access.allows(principal, Operation.DESCRIBE, NAMED_LABELS[label], value)
        return allowed

    return visible
