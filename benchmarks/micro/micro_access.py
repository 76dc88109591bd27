"""Access-control micro-benchmark: what the gRPC access interceptor adds to one call.

No daemon, no network: one process, the users and ACL files in a temporary directory.
One *admission* is what :class:`lkstream.server.grpc.access.AccessInterceptor` does per
call before the servicer runs: authenticate ``authorization: Bearer <token>`` (token
format check, SHA-256, constant-time compare), ask the RPC's rule what it needs
(:data:`RPC_NEEDS`), and :meth:`Access.require` each need against the ACL index.

``fetch``          a Fetch naming a group (2 needs: read topic, read group)
``commit_8``       CommitOffsets over 8 topics (9 needs)
``reload_check``   ``fetch`` with ``security_reload_interval_ms: 0`` (a ``stat`` of both files per call)

The ACL file holds ``--users`` users with 10 entries each (half literal, half prefix),
plus ``*`` entries, so each decision scans a realistic list.

    python -m benchmarks.micro.micro_access [--quick] [--runs N] [--users N]
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import base_parser, emit, log, machine_facts, summary
from lkstream.security.access import Access
from lkstream.security.acl import AclDocument, AclEntry
from lkstream.security.credentials import UsersDocument
from lkstream.server.grpc.permissions import RPC_NEEDS
from lkstream.wire._proto import messaging_pb2 as pb


def write_files(directory: Path, users: int, rng: random.Random) -> tuple[str, str, dict[str, str]]:
    doc = UsersDocument.empty()
    tokens = {f"user{i}": doc.add_token(f"user{i}") for i in range(users)}
    users_file = directory / "users.json"
    users_file.write_bytes(doc.serialize())
    entries = {AclEntry.build("*", "describe", "topic", "*")}
    for i in range(users):
        for j in range(10):
            pattern = "prefix" if j % 2 else "literal"
            entries.add(AclEntry.build(f"user{i}", rng.choice(["read", "write"]), "topic", f"t{j}.", pattern=pattern))
        entries.add(AclEntry.build(f"user{i}", "read", "group", f"g{i}"))
        entries.add(AclEntry.build(f"user{i}", "read", "topic", "orders.", pattern="prefix"))
    acl_file = directory / "acls.json"
    acl_file.write_bytes(AclDocument(entries).serialize())
    return str(users_file), str(acl_file), tokens


def admit(access: Access, method: str, request: Any, header: str) -> None:
    principal = access.authenticate_bearer(header)
    for operation, resource_type, name in RPC_NEEDS[method](request, None):  # type: ignore[arg-type]
        access.require(principal, operation, resource_type, name)


def per_call_us(access: Access, method: str, request: Any, header: str, calls: int) -> float:
    admit(access, method, request, header)  # warm
    started = time.perf_counter()
    for _ in range(calls):
        admit(access, method, request, header)
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1000, help="users in the files (10+2 ACL entries each)")
    args = parser.parse_args()
    calls = 2_000 if args.quick else 50_000
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(dir=args.tmp_root if Path(args.tmp_root).is_dir() else None) as tmp:
        users_file, acl_file, tokens = write_files(Path(tmp), args.users, rng)
        user = f"user{args.users // 2}"
        header = f"Bearer {tokens[user]}"
        cached = Access.from_files(users_file, acl_file, check_interval_s=1.0)
        every_call = Access.from_files(users_file, acl_file, check_interval_s=0.0)
        group = f"g{args.users // 2}"
        fetch = pb.FetchRequest(topic="orders.eu", partition=0, group=group)
        commit = pb.CommitOffsetsRequest(
            group=group, offsets=[pb.PartitionOffset(topic=f"orders.{k}", partition=0, offset=1) for k in range(8)]
        )
        raw: dict[str, list[float]] = {"fetch": [], "commit_8": [], "reload_check": []}
        for run in range(args.runs):
            raw["fetch"].append(per_call_us(cached, "Fetch", fetch, header, calls))
            raw["commit_8"].append(per_call_us(cached, "CommitOffsets", commit, header, calls))
            raw["reload_check"].append(per_call_us(every_call, "Fetch", fetch, header, calls))
            log(f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:.2f} us" for k, v in raw.items()))
        facts = machine_facts(tmp)
    payload = {
        "users": args.users,
        "acl_entries": args.users * 12 + 1,
        "calls_per_run": calls,
        "per_call_us": {name: summary(values, 2) for name, values in raw.items()},
    }
    emit("micro_access", args, payload, facts)


if __name__ == "__main__":
    main()
