"""The HTTP access middleware on a small aiohttp app, and on a real daemon with authentication on."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from unittest import mock

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer, make_mocked_request

from lkstream.security.access import Access
from lkstream.security.credentials import UsersDocument
from lkstream.security.watched import edit_file
from lkstream.server.http.access import PRINCIPAL_KEY, HttpAccess
from tests.security.conftest import SecureFactory


def make_access(tmp_path: Path, *users: str, super_users: tuple[str, ...] = ()) -> tuple[Access, dict[str, str]]:
    path = str(tmp_path / "users.json")
    tokens = {
        user: edit_file(
            path, UsersDocument.parse, UsersDocument.empty, UsersDocument.serialize, lambda d, u=user: d.add_token(u)
        )
        for user in users
    }
    return Access.from_files(path, str(tmp_path / "acls.json"), super_users), tokens


async def text(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def whoami(request: web.Request) -> web.Response:
    principal = request.get(PRINCIPAL_KEY)
    return web.json_response({"principal": None if principal is None else principal.name})


Serve = Callable[[HttpAccess], Any]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[TestServer] = []

    async def start(guard: HttpAccess) -> str:
        app = web.Application(middlewares=[guard.middleware])
        app.router.add_get("/healthz", text)
        app.router.add_get("/metrics", text)
        app.router.add_get("/topics", whoami)
        app.router.add_post("/produce", whoami)
        app.router.add_post("/produce/{partition}", whoami)
        server = TestServer(app, host="127.0.0.1", port=0)
        await server.start_server()
        servers.append(server)
        return f"http://127.0.0.1:{server.port}"

    yield start
    for server in servers:
        await server.close()


async def fetch(method: str, url: str, **kwargs: Any) -> tuple[int, dict[str, Any], Any]:
    async with aiohttp.ClientSession() as session, session.request(method, url, **kwargs) as response:
        body = await response.json() if response.content_type == "application/json" else await response.text()
        return response.status, dict(response.headers), body


async def test_open_routes_need_nothing_even_with_a_foreign_host(serve: Serve, tmp_path: Path) -> None:
    access, _ = make_access(tmp_path)
    url = await serve(HttpAccess(access))
    for path in ("/healthz", "/metrics"):
        status, _, _ = await fetch("GET", url + path, headers={"Host": "10.1.2.3:8080"})
        assert status == 200


async def test_api_needs_a_token_and_says_how(serve: Serve, tmp_path: Path) -> None:
    access, tokens = make_access(tmp_path, "alice")
    url = await serve(HttpAccess(access))
    status, headers, body = await fetch("GET", url + "/topics")
    assert status == 401 and body["error"]["code"] == "authentication"
    assert headers["WWW-Authenticate"].startswith("Bearer")
    status, _, body = await fetch("GET", url + "/topics", headers={"Authorization": "Bearer lkst_nope"})
    assert status == 401 and "unknown or revoked" in body["error"]["message"]
    status, _, body = await fetch("GET", url + "/topics", headers={"Authorization": f"Bearer {tokens['alice']}"})
    assert (status, body) == (200, {"principal": "alice"})


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080", "192.0.2.7:80"])
async def test_foreign_host_header_is_refused(serve: Serve, tmp_path: Path, host: str) -> None:
    url = await serve(HttpAccess(Access.disabled()))
    status, _, body = await fetch("GET", url + "/topics", headers={"Host": host})
    assert status == 421 and body["error"]["code"] == "host_not_allowed"


@pytest.mark.parametrize("host", ["localhost:1", "127.0.0.1", "[::1]:8080", "lkstream.internal:8080"])
async def test_loopback_and_allowed_hosts_pass(serve: Serve, tmp_path: Path, host: str) -> None:
    url = await serve(HttpAccess(Access.disabled(), allowed_hosts=["lkstream.internal"]))
    status, _, body = await fetch("GET", url + "/topics", headers={"Host": host})
    assert (status, body) == (200, {"principal": "ANONYMOUS"})


async def test_browser_origin_is_refused_unless_allowed(serve: Serve, tmp_path: Path) -> None:
    url = await serve(HttpAccess(Access.disabled(), allowed_origins=["https://console.example"]))
    headers = {"Content-Type": "application/json"}
    status, _, body = await fetch(
        "POST", url + "/produce", data=b"{}", headers={**headers, "Origin": "https://evil.example"}
    )
    assert status == 403 and body["error"]["code"] == "origin_not_allowed"
    status, _, _ = await fetch(
        "POST", url + "/produce", data=b"{}", headers={**headers, "Origin": "https://console.example"}
    )
    assert status == 200
    status, _, _ = await fetch("POST", url + "/produce", data=b"{}", headers=headers)  # scripts send no Origin
    assert status == 200


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None]
)
async def test_body_without_json_content_type_is_refused(serve: Serve, content_type: str | None) -> None:
    url = await serve(HttpAccess(Access.disabled()))
    headers = {} if content_type is None else {"Content-Type": content_type}
    status, _, body = await fetch("POST", url + "/produce", data=b'{"x": 1}', headers=headers)
    assert status == 415 and body["error"]["code"] == "unsupported_media_type"


async def test_the_event_log_route_takes_a_form_but_not_from_another_site(serve: Serve) -> None:
    url = await serve(HttpAccess(Access.disabled(), allowed_origins=["https://console.example"]))
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    status, _, _ = await fetch("POST", url + "/produce/5", data=b"key=k&value=v", headers=form)  # curl -d
    assert status == 200
    foreign = [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},  # a sandboxed frame or a file:// page
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},  # another port of localhost is the same site, not the same origin
    ]
    for headers in foreign:
        status, _, body = await fetch("POST", url + "/produce/5", data=b"key=k&value=v", headers={**form, **headers})
        assert status == 403 and body["error"]["code"] == "origin_not_allowed", headers
    allowed = {"Origin": "https://console.example", "Sec-Fetch-Site": "cross-site"}
    status, _, _ = await fetch("POST", url + "/produce/5", data=b"key=k&value=v", headers={**form, **allowed})
    assert status == 200
    status, _, _ = await fetch("POST", url + "/produce/5", data=b"k", headers={"Content-Type": "text/plain"})
    assert status == 415


async def test_a_browser_page_of_another_site_may_not_read_either(serve: Serve) -> None:
    url = await serve(HttpAccess(Access.disabled()))
    status, _, body = await fetch("GET", url + "/topics", headers={"Sec-Fetch-Site": "cross-site"})
    assert status == 403 and body["error"]["code"] == "origin_not_allowed"
    for site in ("same-origin", "none"):  # the daemon's own page, or a URL typed into the address bar
        assert (await fetch("GET", url + "/topics", headers={"Sec-Fetch-Site": site}))[0] == 200


def test_a_token_over_plaintext_from_another_host_is_refused(tmp_path: Path) -> None:
    access, tokens = make_access(tmp_path, "alice")
    guard = HttpAccess(access, allowed_hosts=["broker.example"])
    transport = mock.Mock()  # a remote peer cannot be made on this loopback-only machine
    transport.get_extra_info.side_effect = lambda name, default=None: (
        ("192.0.2.5", 40000) if name == "peername" else default
    )
    request = make_mocked_request(
        "GET",
        "/topics",
        headers={"Host": "broker.example", "Authorization": f"Bearer {tokens['alice']}"},
        transport=transport,
    )
    refusal = guard._authenticate(request)
    assert refusal is not None and refusal.status == 403 and b"tls_required" in refusal.body  # type: ignore[operator]


async def test_daemon_with_auth_guards_the_json_api_and_leaves_probes_open(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon()
    user_token = daemon.token("alice")
    base = f"http://{daemon.process.http_address}"
    for path in ("/healthz", "/ready", "/metrics"):
        assert (await fetch("GET", base + path))[0] == 200
    assert (await fetch("GET", base + "/topics"))[0] == 401
    alice = {"Authorization": f"Bearer {user_token}"}
    status, _, body = await fetch("POST", base + "/topics", json={"name": "web", "partitions": 1}, headers=alice)
    assert status == 403 and "not allowed to create topic 'web'" in body["error"]["message"], body
    admin = {"Authorization": f"Bearer {daemon.admin_token}"}
    status, _, body = await fetch("POST", base + "/topics", json={"name": "web", "partitions": 1}, headers=admin)
    assert status == 201, body
    status, _, body = await fetch("GET", base + "/topics", headers=admin)
    assert status == 200 and body["topics"] == ["web"]
    assert (await fetch("GET", base + "/topics", headers=alice))[2] == {"topics": []}  # nothing she may describe
    status, _, _ = await fetch(
        "POST", base + "/topics", data=b'{"name": "x"}', headers={**admin, "Content-Type": "text/plain"}
    )
    assert status == 415
    status, _, _ = await fetch("GET", base + "/topics", headers={**admin, "Host": "attacker.example"})
    assert status == 421
    metrics = (await fetch("GET", base + "/metrics"))[2]
    assert 'lk_request_errors_total{code="UNAUTHENTICATED"}' in metrics
    assert 'lk_request_errors_total{code="PERMISSION_DENIED"}' in metrics
