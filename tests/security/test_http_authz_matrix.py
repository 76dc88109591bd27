"""Every route of the HTTP JSON API is refused without the right permission and allowed with it.

The cases are checked against the OpenAPI document the daemon serves: a new route
without a rule in :data:`ROUTE_NEEDS` and a case here fails
:func:`test_every_route_has_a_rule_and_cases`. Against a real daemon with ``auth: true``
each case is refused (401) without a token or with an unknown one, refused (403 naming
the missing operation and resource) with each needed entry left out in turn, and
admitted (neither 401 nor 403) with all of them. Filtered listings need nothing and
show only what the caller may describe.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import lkstream
from lkstream.security.acl import AclEntry
from lkstream.server.http.openapi import openapi_document
from lkstream.server.http.permissions import ROUTE_NEEDS
from tests.integration.conftest import REPO
from tests.security.conftest import SecureDaemon, SecureFactory

USER = "alice"
ORDERS = "orders"
DEFAULT_TOPIC = "events"  # server.http_default_topic


def acl(op: str, kind: str, name: str) -> AclEntry:
    return AclEntry.build(USER, op, kind, name)


@dataclass
class Case:
    path: str
    needs: list[AclEntry]
    body: Any = None  # JSON
    form: bytes | None = None
    label: str = ""
    # A filtered listing needs nothing; it lists `listed` only with the `shows` entry.
    listed: str | None = None
    shows: AclEntry | None = None


#: In the order they run: the event-log routes first meet the default topic missing.
CASES: dict[str, list[Case]] = {
    "GET /fetch/{partition}": [
        Case(
            "/fetch/5",
            [acl("read", "topic", DEFAULT_TOPIC), acl("create", "topic", DEFAULT_TOPIC)],
            label="creates the default topic",
        )
    ],
    "POST /produce/{partition}": [
        Case("/produce/5", [acl("write", "topic", DEFAULT_TOPIC)], form=b"key=k&value=v", label="form body"),
        Case("/produce/6", [acl("write", "topic", DEFAULT_TOPIC)], body={"value": "v"}, label="JSON body"),
    ],
    "POST /produce": [
        Case(
            "/produce",
            [acl("write", "topic", ORDERS)],
            body={"topic_partitions": [{"topic": ORDERS, "partition": 0, "records": ["a"]}]},
            label="existing topic",
        ),
        Case(
            "/produce",
            [acl("write", "topic", "auto.http"), acl("create", "topic", "auto.http")],
            body={"topic_partitions": [{"topic": "auto.http", "records": ["a"]}]},
            label="auto-created topic",
        ),
    ],
    "POST /consume": [
        Case(
            "/consume",
            [acl("read", "topic", ORDERS)],
            body={"partitions": [{"topic": ORDERS, "partition": 0, "fetch_offset": 0}]},
        ),
        Case(
            "/consume",
            [acl("read", "topic", ORDERS), acl("read", "group", "g1")],
            body={"partitions": [{"topic": ORDERS, "partition": 0}], "group": "g1"},
            label="as a group",
        ),
    ],
    "GET /topics": [Case("/topics", [], listed=ORDERS, shows=acl("describe", "topic", ORDERS))],
    "POST /topics": [Case("/topics", [acl("create", "topic", "fresh")], body={"name": "fresh", "partitions": 1})],
    "GET /topics/{topic}": [Case(f"/topics/{ORDERS}", [acl("describe", "topic", ORDERS)])],
    "DELETE /topics/{topic}": [Case("/topics/doomed", [acl("delete", "topic", "doomed")])],
    "GET /topics/{topic}/configs": [Case(f"/topics/{ORDERS}/configs", [acl("describe_configs", "topic", ORDERS)])],
    "PATCH /topics/{topic}/configs": [
        Case(
            f"/topics/{ORDERS}/configs",
            [acl("alter_configs", "topic", ORDERS)],
            body={"set": {"retention.ms": "-1"}, "validate_only": True},
        )
    ],
    "POST /topics/{topic}/partitions": [
        Case(f"/topics/{ORDERS}/partitions", [acl("create", "topic", ORDERS)], body={"count": 9, "validate_only": True})
    ],
    # After every route that reads ORDERS from offset 0: this one purges its record.
    "POST /topics/{topic}/delete-records": [
        Case(
            f"/topics/{ORDERS}/delete-records",
            [acl("delete", "topic", ORDERS)],
            body={"partitions": [{"partition": 0, "before": 1}]},
        )
    ],
    "GET /groups/{group}": [
        Case("/groups/g1", [acl("describe", "group", "g1")], listed=ORDERS, shows=acl("describe", "topic", ORDERS))
    ],
    "GET /openapi.json": [Case("/openapi.json", [])],
}


def document_routes() -> set[str]:
    return {
        f"{method.upper()} {path}"
        for path, item in openapi_document()["paths"].items()
        for method in item
        if method != "parameters"
    }


def test_every_route_has_a_rule_and_cases() -> None:
    routes = document_routes()
    assert set(ROUTE_NEEDS) == routes, "every route needs an access rule in lkstream.server.http.permissions"
    assert set(CASES) == routes, "every route needs cases in this matrix"
    assert {key for key, rule in ROUTE_NEEDS.items() if rule.filtered} == {"GET /topics", "GET /groups/{group}"}


def call(base: str, method: str, case: Case, token: str | None) -> tuple[int, Any]:
    data, headers = None, {}
    if case.form is not None:
        data, headers = case.form, {"Content-Type": "application/x-www-form-urlencoded"}
    elif case.body is not None:
        data, headers = json.dumps(case.body).encode(), {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(base + case.path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            status, payload = exc.code, exc.read()
    return status, json.loads(payload) if payload else None


@pytest.fixture
def matrix_daemon(secure_daemon: SecureFactory) -> Iterator[tuple[SecureDaemon, str, str]]:
    daemon = secure_daemon()
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        admin.create_topic(ORDERS, 1)
        admin.create_topic("doomed", 1)
        admin.produce_many_sync(ORDERS, [(None, b"first")])
        admin.commit_offsets("g1", {(ORDERS, 0): 1})
    yield daemon, f"http://{daemon.process.http_address}", daemon.token(USER)


def all_cases() -> list[tuple[str, Case]]:
    return [(route, case) for route, cases in CASES.items() for case in cases]


def test_every_route_is_refused_without_its_permissions_and_allowed_with_them(
    matrix_daemon: tuple[SecureDaemon, str, str],
) -> None:
    daemon, base, token = matrix_daemon
    for route, case in all_cases():
        method = route.split()[0]
        what = f"{route} {case.label}".strip()
        assert call(base, method, case, None)[0] == 401, what
        assert call(base, method, case, "lkst_00000000_" + "x" * 43)[0] == 401, what
        for missing in case.needs:
            daemon.set_acls(*[entry for entry in case.needs if entry != missing])
            status, body = call(base, method, case, token)
            assert status == 403, f"{what} without {missing.describe()}: {status} {body}"
            message = body["error"]["message"]
            assert f"not allowed to {missing.operation}" in message and repr(missing.name) in message, message
        daemon.set_acls(*case.needs)
        status, body = call(base, method, case, token)
        assert status not in (401, 403), f"{what} with {[e.describe() for e in case.needs]}: {status} {body}"
        assert status < 300, f"{what}: {status} {body}"
        if case.listed is not None and case.shows is not None:
            assert case.listed not in json.dumps(body), f"{what} lists {case.listed} without {case.shows.describe()}"
            daemon.set_acls(*case.needs, case.shows)
            assert case.listed in json.dumps(call(base, method, case, token)[1]), what
    daemon.set_acls()


def test_a_super_user_may_call_every_route(matrix_daemon: tuple[SecureDaemon, str, str]) -> None:
    daemon, base, _ = matrix_daemon
    for route, case in all_cases():
        status, body = call(base, route.split()[0], case, daemon.admin_token)
        assert status < 300, f"{route} {case.label}: {status} {body}"


def test_docs_table_names_every_route() -> None:
    text = (REPO / "docs" / "security.md").read_text()
    table = text.split("## 6. What each HTTP route needs", 1)[1].split("## 7.", 1)[0]
    for route in document_routes():
        method, path = route.split()
        assert f"`{method} {path}`" in table, f"docs/security.md section 6 does not say what {route} needs"
