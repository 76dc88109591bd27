"""The seeds' HTTP shapes, run as their READMEs write them, and the HTTP findings of issue 13.

Seed 001's ``POST /produce`` and ``POST /consume`` with ``topic_partitions`` and seed
003's ``POST /produce/{partition}`` (form body) and ``GET /fetch/{partition}`` are run
with real ``curl``, verbatim except for host:port. Then: a gzip body that is not
gzip, refused produces that must not create a topic, a record over the limit with
one code in the CLI and HTTP, and one JSON record shape on the way in and out.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
import urllib.request

import pytest

import lkstream
from tests.integration.conftest import REPO, DaemonFactory, DaemonProcess
from tests.integration.http_support import Api

pytestmark = pytest.mark.timeout(120)

SEED_001 = textwrap.dedent(
    """\
    curl -X POST http://127.0.0.1:8080/produce \\
      -H 'content-type: application/json' \\
      -d '{
        "topic_partitions": [
          {
            "topic": "orders",
            "partition": 0,
            "records": ["alpha", "beta"]
          },
          {
            "topic": "orders",
            "partition": 1,
            "records": [{"base64": "AAE="}]
          }
        ]
      }'
    echo
    curl -X POST http://127.0.0.1:8080/consume \\
      -H 'content-type: application/json' \\
      -d '{
        "topic_partitions": [
          {
            "topic": "orders",
            "partition": 0,
            "fetch_offset": 1,
            "partition_max_bytes": 1048576
          },
          {
            "topic": "orders",
            "partition": 1,
            "fetch_offset": 1
          }
        ],
        "max_wait_ms": 250,
        "min_bytes": 1,
        "max_bytes": 4194304
      }'
    """
)

SEED_003 = textwrap.dedent(
    """\
    curl -X POST http://localhost:8123/produce/5 \\
      -H "Content-Type: application/x-www-form-urlencoded" \\
      -d "key=user43&value=goodbye"
    echo
    curl -X GET http://localhost:8123/fetch/5
    """
)


@pytest.fixture(scope="module")
def curl() -> str:
    path = shutil.which("curl")
    assert path is not None, "curl is part of the tests' environment (Debian's curl package)"
    return path


def run_verbatim(script: str, replacements: dict[str, str]) -> list[object]:
    for seed_address, address in replacements.items():
        script = script.replace(seed_address, address)
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_seed_001_produce_and_consume_with_topic_partitions_run_verbatim(
    start_daemon: DaemonFactory, curl: str
) -> None:
    daemon = start_daemon(partitions=3)
    produced, consumed = run_verbatim(SEED_001, {"127.0.0.1:8080": daemon.http_address})
    assert produced == {
        "results": [
            {
                "topic": "orders",
                "partition": 0,
                "offsets": [{"partition": 0, "offset": 0}, {"partition": 0, "offset": 1}],
            },
            {"topic": "orders", "partition": 1, "offsets": [{"partition": 1, "offset": 0}]},
        ]
    }
    assert isinstance(consumed, dict)
    first, second = consumed["partitions"]
    assert [r["value"] for r in first["records"]] == ["beta"]
    assert (first["next_fetch_offset"], first["high_watermark"]) == (2, 2)
    assert (second["records"], second["next_fetch_offset"], second["high_watermark"]) == ([], 1, 1)


def test_seed_003_produce_by_partition_and_fetch_run_verbatim(daemon: DaemonProcess, curl: str) -> None:
    produced, fetched = run_verbatim(SEED_003, {"localhost:8123": daemon.http_address})
    assert produced == {"topic": "events", "partition": 5, "offset": 0}
    assert isinstance(fetched, list)
    assert [(r["offset"], r["key"], r["value"]) for r in fetched] == [(0, "user43", "goodbye")]
    with lkstream.connect(daemon.address) as client:
        assert client.partitions_for("events") == 100  # seed 003's single topic, created on first use


def test_fetch_pages_with_offset_and_max_and_says_where_the_next_page_starts(daemon: DaemonProcess) -> None:
    api = Api(daemon.http_address)
    for n in range(25):
        reply = api.call("POST", "/produce/7", raw=f"key=k{n}&value=v{n}".encode())
        assert reply.status == 400  # JSON content type with a form body: said plainly
    form = "application/x-www-form-urlencoded"
    for n in range(25):
        request = urllib.request.Request(
            f"http://{daemon.http_address}/produce/7", data=f"key=k{n}&value=v{n}".encode(), method="POST"
        )
        request.add_header("Content-Type", form)
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.loads(response.read())["offset"] == n
    with urllib.request.urlopen(f"http://{daemon.http_address}/fetch/7?offset=10&max=10", timeout=30) as response:
        page = json.loads(response.read())
        assert response.headers["X-Next-Offset"] == "20"
    assert [r["value"] for r in page] == [f"v{n}" for n in range(10, 20)]
    assert api.call("GET", "/fetch/100").error_code == "invalid_argument"  # partitions 0..99
    assert api.call("GET", "/fetch/7?max=-1").error_code == "invalid_request"
    assert api.call("GET", "/fetch/7?offset=99").error_code == "offset_out_of_range"


def test_a_gzip_body_that_is_not_gzip_is_a_400_and_a_real_one_is_read(daemon: DaemonProcess) -> None:
    body = json.dumps({"topic_partitions": [{"topic": "gz", "records": ["zipped"]}]}).encode()
    for path in ("/produce", "/produce/3", "/consume"):
        request = urllib.request.Request(f"http://{daemon.http_address}{path}", data=body, method="POST")
        request.add_header("Content-Encoding", "gzip")
        request.add_header("Content-Type", "application/json")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=30)
        error = json.loads(info.value.read())["error"]
        assert (info.value.code, error["code"]) == (400, "invalid_body"), path
        assert "Content-Encoding: gzip" in error["message"]
    request = urllib.request.Request(f"http://{daemon.http_address}/produce", data=gzip.compress(body), method="POST")
    request.add_header("Content-Encoding", "gzip")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.loads(response.read())["results"][0]["offsets"] == [{"partition": 0, "offset": 0}]
    assert "Traceback" not in "".join(daemon.output)


def test_a_refused_produce_creates_no_topic(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon(max_message_bytes=1000, partitions=2)
    api = Api(daemon.http_address)
    too_large = api.post("/produce", {"topic_partitions": [{"topic": "big", "records": ["x" * 1001]}]})
    assert (too_large.status, too_large.error_code) == (413, "record_too_large")
    no_partition = api.post("/produce", {"topic_partitions": [{"topic": "far", "partition": 5, "records": ["x"]}]})
    assert (no_partition.status, no_partition.error_code) == (400, "invalid_argument")
    own_partition = api.post(
        "/produce", {"topic_partitions": [{"topic": "own", "records": [{"value": "x", "partition": 9}]}]}
    )
    assert own_partition.status == 400
    assert api.call("GET", "/topics").body == {"topics": []}


def test_a_record_over_the_limit_has_one_code_in_cli_and_http_naming_max_message_bytes(
    start_daemon: DaemonFactory,
) -> None:
    daemon = start_daemon(max_message_bytes=1000)
    reply = Api(daemon.http_address).post("/produce", {"topic_partitions": [{"topic": "t", "records": ["x" * 1001]}]})
    assert reply.error_code == "record_too_large"
    assert "max_message_bytes (1000 bytes)" in reply.body["error"]["message"]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    for flags in (["--key-separator", " "], []):
        done = subprocess.run(
            [sys.executable, "-m", "lkstream.cli", "produce", "t", "--bootstrap", daemon.address, *flags],
            input="k " + "x" * 1001 + "\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )
        assert done.returncode == 1
        error = done.stderr.splitlines()[-1]
        assert error.startswith("Error: RECORD_TOO_LARGE: message of 100") and "max_message_bytes (1000 bytes)" in error
    assert Api(daemon.http_address).call("GET", "/topics").body == {"topics": []}


def test_consumed_records_posted_back_copy_a_partition_with_their_partitions(daemon: DaemonProcess) -> None:
    api = Api(daemon.http_address)
    api.post("/topics", {"name": "a", "partitions": 2})
    api.post("/topics", {"name": "b", "partitions": 2})
    records = [
        {
            "key": {"base64": "/w=="},
            "value": {"base64": "AAGA"},
            "headers": [{"key": "h", "value": {"base64": "gA=="}}],
        },
        {"key": None, "value": "text", "headers": {"x": "y"}},
    ]
    for pid in (0, 1):
        assert (
            api.post("/produce", {"topic_partitions": [{"topic": "a", "partition": pid, "records": records}]}).status
            == 200
        )
    consumed = api.post("/consume", {"partitions": [{"topic": "a"}]}).body["partitions"]
    copies = [{**r, "topic": p["topic"], "partition": p["partition"]} for p in consumed for r in p["records"]]
    reply = api.post("/produce", {"topic_partitions": [{"topic": "b", "records": copies}]})
    assert reply.status == 200, reply.body
    again = api.post("/consume", {"partitions": [{"topic": "b"}]}).body["partitions"]
    strip = lambda parts: [[(r["key"], r["value"], r["headers"]) for r in p["records"]] for p in parts]  # noqa: E731
    assert strip(again) == strip(consumed)
    assert strip(consumed)[0][1][2] == [{"key": "x", "value": "y"}]
