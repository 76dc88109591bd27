"""With auth on, /metrics names a topic or a group only to a scraper that may describe it (issue 28, finding 13).

Before: the open /metrics listed every topic and group to anyone who reached the HTTP port, while every
other surface hid names from callers without ACLs.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import pytest

import lkstream
from lkstream.security.acl import AclEntry
from tests.security.conftest import SecureDaemon, SecureFactory


def scrape(daemon: SecureDaemon, token: str | None, *, admin: bool = False) -> str:
    address = daemon.process.admin_address if admin else daemon.process.http_address
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    with urllib.request.urlopen(urllib.request.Request(f"http://{address}/metrics", headers=headers), timeout=10) as r:
        return str(r.read().decode())


def named(text: str) -> set[str]:
    """Every topic and group named in a label."""
    return set(re.findall(r'(?:topic|group)="([^"]+)"', text))


@pytest.mark.parametrize("admin", [False, True], ids=["http port", "admin listener"])
def test_metrics_name_only_what_the_scraper_may_describe(secure_daemon: SecureFactory, admin: bool) -> None:
    daemon = secure_daemon(admin_port=0)
    with lkstream.connect(daemon.address, token=daemon.admin_token) as client:
        for topic in ("payroll", "orders"):
            client.create_topic(topic, 1)
            client.produce_many_sync(topic, [(None, b"x")])
    scraper = daemon.token("prometheus")
    daemon.grant(AclEntry.build("prometheus", "describe", "topic", "orders"))

    anonymous = scrape(daemon, None, admin=admin)
    assert named(anonymous) == set()  # before: payroll and orders, to anyone
    assert "lk_admitted_bytes " in anonymous and "lk_fsync_latency_seconds" in anonymous  # the rest is there
    assert named(scrape(daemon, scraper, admin=admin)) == {"orders"}
    assert {"payroll", "orders"} <= named(scrape(daemon, daemon.admin_token, admin=admin))
    with pytest.raises(urllib.error.HTTPError) as refused:
        scrape(daemon, "lkst_00000000_" + "x" * 43, admin=admin)
    assert refused.value.code == 401


def test_with_auth_off_metrics_are_unchanged(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon(auth=False)
    with lkstream.connect(daemon.address) as client:
        client.create_topic("orders", 1)
        client.produce_many_sync("orders", [(None, b"x")])
    assert "orders" in named(scrape(daemon, None))
