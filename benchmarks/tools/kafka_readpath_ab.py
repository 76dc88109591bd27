"""Issue 25's Kafka-listener figures for several git revisions, interleaved (before and after a change).

Each round runs every revision once (the order reversed every other round) in a fresh daemon of
that revision (``git archive``'d with its C extensions compiled, first on ``PYTHONPATH``, as
``daemon_ab.py`` does; ``wt`` is the working tree). One run, with confluent-kafka:

``e2e_10k``          produce-to-poll latency at 10,000 msg/s (the peer suite's ``e2e_10k``: 1 KiB
                     values, ``linger.ms`` 1, the reader's ``fetch.wait.max.ms`` 10), 3 s.
``consume_default``  500,000 records of 200 B in one partition, read from the start with
                     ``Consumer.assign`` + ``consume(10000, 1.0)`` and librdkafka's default settings
                     (how issue 25 measured the gap): the rate over the whole read, and from the first
                     batch on (``steady``: librdkafka's 0.5 s offset query left out).
``consume_suite``    the same records read by the suite's consumer (8 MiB per partition,
                     ``fetch.queue.backoff.ms`` 1).

    .venv/bin/python -m benchmarks.tools.kafka_readpath_ab main wt --rounds 3
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import REPO, base_parser, emit, log, machine_facts
from benchmarks.tools.quick import revision_tree

MSGS = 500_000
VALUE = 200


def worker() -> None:
    """One run against a daemon of whatever ``lkstream`` is first on the path; JSON on stdout."""
    sys.path.append(str(REPO))  # for benchmarks.suite: after the revision's tree, whose lkstream comes first
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    import lkstream
    from benchmarks.suite.core import Schedule, lat_summary
    from benchmarks.suite.lk_kafka import LkKafka

    out: dict[str, float] = {"lkstream_from_revision": float(not Path(lkstream.__file__).is_relative_to(REPO))}
    with tempfile.TemporaryDirectory(dir=REPO / ".bench-tmp") as tmp:
        system = LkKafka()
        system.start(Path(tmp))
        try:
            lat = lat_summary(system.e2e("e2e", Schedule(rate=10_000, seconds=3.0), 1024).latencies_s)
            out.update({"e2e_10k/p50_ms": lat["p50_ms"], "e2e_10k/p99_ms": lat["p99_ms"]})
            system.produce("c", 1, [bytes([i % 251]) * VALUE for i in range(64)], MSGS, 60.0)
            consumer = Consumer({"bootstrap.servers": system.bootstrap, "group.id": "ab", "enable.auto.commit": False})
            consumer.assign([TopicPartition("c", 0, OFFSET_BEGINNING)])
            count, started, first = 0, time.perf_counter(), None
            while count < MSGS:
                count += len(consumer.consume(10_000, 1.0))
                if first is None and count:
                    first = (count, time.perf_counter())
            ended = time.perf_counter()
            consumer.close()
            assert first is not None
            out["consume_default/msg_per_s"] = count / (ended - started)
            out["consume_default/steady_msg_per_s"] = (count - first[0]) / (ended - first[1])
            suite = system.consume("c", 1, MSGS, 60.0)
            out["consume_suite/msg_per_s"] = suite.msgs / suite.seconds
            if suite.steady_msgs and suite.steady_seconds:
                out["consume_suite/steady_msg_per_s"] = suite.steady_msgs / suite.steady_seconds
        finally:
            system.stop()
    print(json.dumps(out))


def one_run(tree: Path | None) -> dict[str, float]:
    env = dict(os.environ)
    paths = [str(REPO / "benchmarks"), env.get("PYTHONPATH", "")]
    if tree is not None:
        paths.insert(0, str(tree))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    done = subprocess.run(
        [sys.executable, __file__, "--worker"], env=env, capture_output=True, text=True, check=False, timeout=600
    )
    if done.returncode:
        raise SystemExit(f"worker failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    if sys.argv[1:] == ["--worker"]:
        worker()
        return
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("revisions", nargs="+", help="git revisions, or wt for the working tree")
    parser.add_argument("--rounds", type=int, default=3, help="runs per revision (default 3)")
    args = parser.parse_args()
    facts = machine_facts(REPO)
    rows: list[dict[str, Any]] = []
    (REPO / ".bench-tmp").mkdir(exist_ok=True)
    with contextlib.ExitStack() as stack:
        trees = {rev: None if rev == "wt" else stack.enter_context(revision_tree(rev)) for rev in args.revisions}
        for round_ in range(args.rounds):
            order = args.revisions if round_ % 2 == 0 else list(reversed(args.revisions))
            for rev in order:
                result = one_run(trees[rev])
                rows.append({"round": round_, "revision": rev, **result})
                log(f"round {round_} {rev}: " + ", ".join(f"{k}={v:,.2f}" for k, v in result.items()))
    fields = sorted({k for row in rows for k in row if "/" in k})
    summary = {
        rev: {f: statistics.median(r[f] for r in rows if r["revision"] == rev and f in r) for f in fields}
        for rev in args.revisions
    }
    for rev, values in summary.items():
        log(f"{rev}: " + ", ".join(f"{k}={v:,.2f}" for k, v in values.items()))
    emit("kafka_readpath_ab", args, {"revisions": args.revisions, "medians": summary, "rows": rows}, facts)


if __name__ == "__main__":
    main()
