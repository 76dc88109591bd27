"""`lkstream consume` as rpk and kcat users expect it (issue 26, items 1, 3 and 4).

Real ``lkstream`` subprocesses against a real daemon on free loopback ports; kcat, where
installed (``make test`` installs it), is the reference for the format string.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import signal
import subprocess
import sys
import time

import pytest

import lkstream
from tests.integration.conftest import REPO, DaemonFactory, DaemonProcess
from tests.integration.test_cli_first_steps import env, one_error_line, run

pytestmark = pytest.mark.timeout(240)

LKSTREAM = [sys.executable, "-m", "lkstream.cli"]
HOUR_MS = 3_600_000


def start(*args: str) -> subprocess.Popen[str]:
    """``lkstream ARGS`` in the background, as a second terminal runs it."""
    return subprocess.Popen(
        [*LKSTREAM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=REPO
    )


def stop(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    """Ctrl-C, then what it printed."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err


# -- item 1: --group is a member -----------------------------------------------------------------------


def test_two_group_consumers_split_the_partitions_and_both_exit_cleanly(daemon: DaemonProcess) -> None:
    """Two `consume --group` split the partitions (each reads only its own once the group is stable),
    every record is printed, and both commit and leave cleanly on Ctrl-C."""
    with lkstream.connect(daemon.address) as client:
        client.create_topic("orders", 4)
        client.produce_many_sync("orders", [(f"user-{n}".encode(), f"order-{n}".encode()) for n in range(400)])
    member = ["consume", "orders", "--group", "billing", "--follow", "-f", r"%p %s\n", "--bootstrap", daemon.address]
    members = [start(*member)]
    deadline = time.monotonic() + 120
    with lkstream.connect(daemon.address) as client:
        while len(client.describe_group("billing").members) < 1:
            assert time.monotonic() < deadline, "the first member never joined"
            time.sleep(0.1)
        members.append(start(*member))
        while True:
            described = client.describe_group("billing")
            if (
                len(described.members) == 2
                and str(described.state) == "Stable"
                and all(m.owned for m in described.members)
            ):
                break
            assert time.monotonic() < deadline, f"the group never split: {described}"
            time.sleep(0.1)
        owned = sorted(sorted(pid for _, pid in m.owned) for m in described.members)
        client.produce_many_sync("orders", [(f"user-{n}".encode(), f"order-{n}".encode()) for n in range(400, 800)])
        while client.group_lag("billing") and any(lag.lag_messages for lag in client.group_lag("billing")):
            assert time.monotonic() < deadline, "the members did not catch up"
            time.sleep(0.2)
    results = [stop(process) for process in members]
    for code, _, err in results:
        assert code == 0, err
        assert "Error" not in err and "Traceback" not in err, err
    printed = [[line.split() for line in out.splitlines()] for _, out, _ in results]
    everything = [value for lines in printed for _, value in lines]
    assert set(everything) == {f"order-{n}" for n in range(800)}, "every order printed"
    # Produced once the group was stable: each order printed once, by the member owning its partition.
    late = [[(int(pid), value) for pid, value in lines if int(value.split("-")[1]) >= 400] for lines in printed]
    assert sorted(value for lines in late for _, value in lines) == sorted(f"order-{n}" for n in range(400, 800))
    assert sorted(sorted({pid for pid, _ in lines}) for lines in late) == owned
    assert owned[0] and owned[1] and sorted(owned[0] + owned[1]) == [0, 1, 2, 3]
    with lkstream.connect(daemon.address) as client:
        ends = [p.high_watermark for p in client.describe_topic("orders").partitions]
        assert client.committed_offsets("billing", "orders") == dict(enumerate(ends))


def test_a_group_member_without_follow_stops_at_the_end_and_the_next_one_resumes(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as client:
        client.create_topic("two", 2)
        client.produce_many_sync("two", [(None, b"a")], partition=0)
        client.produce_many_sync("two", [(None, b"b")], partition=1)
    first = run("consume", "two", "-g", "g1", "--bootstrap", daemon.address)
    assert (first.returncode, sorted(first.stdout.split())) == (0, ["a", "b"]), first.stderr
    again = run("consume", "two", "-g", "g1", "--bootstrap", daemon.address)
    assert (again.returncode, again.stdout) == (0, ""), again.stderr


# -- item 3: formats, positions, times, topics ---------------------------------------------------------

RECORDS = [
    (b"k1", b"v1", [("a", b"x"), ("b", None), ("a", b"y,z=w")]),
    (None, None, []),
    (b"k3", b"", []),
    (b"", b"v4", [("h", b"")]),
]
FORMAT = r"k=%k K=%K s=%s S=%S T=%T h=%h t=%t p=%p o=%o %%\t|\x41\n"


def test_the_format_string_prints_what_kcat_prints(daemon: DaemonProcess) -> None:
    # Not a skip: the comparison must fail loudly where kcat is missing (scripts/install-system-deps.sh installs it).
    assert shutil.which("kcat") is not None, "kcat is not installed: run scripts/install-system-deps.sh"
    with lkstream.connect(daemon.address) as client:
        client.produce_many_sync("h", RECORDS, partition=0)
    ours = subprocess.run(
        [*LKSTREAM, "consume", "h", "-f", FORMAT, "--bootstrap", daemon.address],
        capture_output=True,
        timeout=60,
        check=False,
        env=env(),
    )
    kcat = subprocess.run(
        ["kcat", "-b", daemon.kafka_address, "-t", "h", "-C", "-e", "-q", "-f", FORMAT],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert ours.returncode == 0, ours.stderr
    assert kcat.returncode == 0, kcat.stderr
    assert ours.stdout == kcat.stdout
    assert b"h=a=x,b=NULL,a=y,z=w" in ours.stdout and b"K=-1 s= S=-1" in ours.stdout


def test_nulls_and_headers_show_without_json(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as client:
        client.produce_many_sync("n", RECORDS, partition=0)
    done = run("consume", "n", "-Z", "-f", r"[%k][%s][%h]\n", "--bootstrap", daemon.address)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[k1][v1][a=x,b=NULL,a=y,z=w]", "[NULL][NULL][]", "[k3][][]", "[][v4][h=]"]
    bad = run("consume", "n", "-f", "%q", "--bootstrap", daemon.address)
    assert bad.returncode == 2 and "unknown token %q" in bad.stderr


def test_relative_end_and_per_partition_positions(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as client:
        client.create_topic("pos", 2)
        for pid in (0, 1):
            client.produce_many_sync("pos", [(None, f"{pid}-{n}".encode()) for n in range(10)], partition=pid)

    def values(*args: str) -> list[str]:
        done = run("consume", "pos", *args, "--bootstrap", daemon.address)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert values("--from", "-2") == ["0-8", "0-9", "1-8", "1-9"]  # kcat's -o -2: two before the end
    assert values("-o", "end-1", "-p", "1") == ["1-9"]
    assert values("-o", "+8") == ["0-8", "0-9", "1-8", "1-9"]
    assert values("-o", "start+9", "-p", "0,1") == ["0-9", "1-9"]
    assert values("-o", "0:7,1:end-1") == ["0-7", "0-8", "0-9", "1-9"]
    assert values("-o", "-50") == [f"{pid}-{n}" for pid in (0, 1) for n in range(10)]  # clamped to the log start
    assert values("-o", "latest") == []
    assert values("-o", "beginning", "-n", "3") == ["0-0", "0-1", "0-2"]
    bad = run("consume", "pos", "-o", "middle", "--bootstrap", daemon.address)
    assert bad.returncode == 2 and "is not a position" in bad.stderr


def test_from_timestamp_takes_iso_dates_and_durations(daemon: DaemonProcess) -> None:
    now = int(time.time() * 1000)
    lines = [{"value": f"t-{hours}h", "timestamp": now - hours * HOUR_MS} for hours in (3, 2)] + [{"value": "now"}]
    produced = run(
        "produce", "times", "--json", "--bootstrap", daemon.address, stdin="".join(json.dumps(x) + "\n" for x in lines)
    )
    assert produced.returncode == 0, produced.stderr

    def values(*args: str) -> list[str]:
        done = run("consume", "times", *args, "--bootstrap", daemon.address)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert values("--from-timestamp", "-1h") == ["now"]
    assert values("--from-timestamp", "150m") == ["t-2h", "now"]
    two_and_a_half = dt.datetime.fromtimestamp((now - 150 * 60_000) / 1000, dt.UTC)
    assert values("--from-timestamp", two_and_a_half.strftime("%Y-%m-%dT%H:%M:%SZ")) == ["t-2h", "now"]
    local = dt.datetime.fromtimestamp((now - 4 * HOUR_MS) / 1000).strftime("%Y-%m-%dT%H:%M")  # local time, naive
    assert values("--from-timestamp", local) == ["t-3h", "t-2h", "now"]
    assert values("-o", "@-90m") == ["now"]
    assert values("--from-timestamp", str(now - 2 * HOUR_MS)) == ["t-2h", "now"]
    bad = run("consume", "times", "--from-timestamp", "yesterday", "--bootstrap", daemon.address)
    assert bad.returncode == 2 and "is not a time" in bad.stderr


def test_several_topics_and_patterns_in_one_consume(daemon: DaemonProcess) -> None:
    with lkstream.connect(daemon.address) as client:
        for topic in ("app.a", "app.b", "other"):
            client.produce_many_sync(topic, [(None, topic.encode())])

    def topics(*args: str) -> list[str]:
        done = run("consume", *args, "-f", r"%t\n", "--bootstrap", daemon.address)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert topics("app.b", "other") == ["app.b", "other"]
    assert topics("-r", r"app\..*") == ["app.a", "app.b"]
    assert topics("^app", "other") == ["app.a", "app.b", "other"]  # kcat: a topic starting with ^ is a pattern
    none = run("consume", "-r", "nothing.*", "--bootstrap", daemon.address)
    assert none.returncode == 1 and one_error_line(none.stderr) == "Error: NOT_FOUND: no topic matches 'nothing.*'"


# -- item 4: a follower waits for its topic ------------------------------------------------------------


def test_follow_waits_for_a_topic_that_does_not_exist_yet(daemon: DaemonProcess) -> None:
    follower = start("consume", "later", "--follow", "-n", "2", "--bootstrap", daemon.address)
    assert follower.stderr is not None
    line = follower.stderr.readline()
    assert "waiting for topic 'later' to be created" in line, line
    assert follower.poll() is None, "the follower gave up"
    with lkstream.connect(daemon.address) as client:
        client.produce_many_sync("later", [(None, b"first"), (None, b"second")])
    out, err = follower.communicate(timeout=60)
    assert (follower.returncode, out) == (0, "first\nsecond\n"), err


def test_follow_on_a_missing_topic_is_not_found_when_nothing_creates_it(start_daemon: DaemonFactory) -> None:
    daemon = start_daemon(auto_create_topics=False)
    done = run("consume", "never", "--follow", "--bootstrap", daemon.address)
    assert done.returncode == 1
    assert one_error_line(done.stderr) == "Error: NOT_FOUND: unknown topic 'never'"


def test_short_flags_are_rpk_s_and_kcat_s() -> None:
    helped = run("consume", "--help").stdout
    for flag in (
        "-o, --offset, --from",
        "-p, --partition",
        "-n, --num, --max-messages",
        "-f, --format",
        "-g, --group",
        "-Z",
    ):
        assert flag in helped, flag
    produced = run("produce", "--help").stdout
    for flag in ("-K, --key-separator", "-k, --key", "-H, --header", "-p, --partition", "-z, --compression"):
        assert flag in produced, flag
