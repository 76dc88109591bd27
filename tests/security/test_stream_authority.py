"""Open gRPC streams and long polls answer to the token and ACLs in force now (issue 28, findings 8 and 12).

A Subscribe or SubscribeBatches stream was authorized once, when it opened: a revoked token
or a removed ACL entry did not stop it, and records produced after the revocation still
arrived. A long-poll Fetch (unary or on a FetchStream) was authorized before its wait and
delivered what arrived during it. And every cancelled stream with authentication on logged
an ERROR traceback from the access interceptor's context handling.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import grpc
import pytest

import lkstream
from lkstream.security.acl import AclEntry
from lkstream.wire._proto import messaging_pb2 as pb
from tests.security.conftest import SecureDaemon, SecureFactory

#: How long the daemon may take to end a stream after a revocation (the files are re-read on every check).
ENDS_WITHIN_S = 10.0


def _metadata(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _reader(daemon: SecureDaemon, topic: str) -> str:
    token = daemon.token("reader")
    daemon.grant(AclEntry.build("reader", "read", "topic", topic))
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        admin.create_topic(topic, 1)
        admin.produce_many_sync(topic, [(None, b"before")])
    return token


async def _follow_until_refused(
    daemon: SecureDaemon, method: str, token: str, topic: str, revoke: Any
) -> tuple[grpc.StatusCode, list[bytes]]:
    """Subscribe with ``token``, take the first delivery, ``revoke()``, produce, return the end status and
    what arrived after the revocation."""
    response_type = pb.Record if method == "Subscribe" else pb.FetchResponse
    async with grpc.aio.insecure_channel(daemon.address) as channel:
        call = channel.unary_stream(f"/lkstream.Broker/{method}", response_deserializer=response_type.FromString)(
            pb.FetchRequest(topic=topic, partition=0, offset=0).SerializeToString(),
            metadata=_metadata(token),
            timeout=60,
        )
        stream = call.__aiter__()
        await asyncio.wait_for(anext(stream), 10)  # the record produced before
        revoke()
        with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
            await admin.produce_many(topic, [(None, b"after")])
        arrived: list[bytes] = []
        started = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            while True:
                message = await asyncio.wait_for(anext(stream), ENDS_WITHIN_S)
                arrived.append(message.value if method == "Subscribe" else message.record_batches)
        assert time.monotonic() - started < ENDS_WITHIN_S
        return ended.value.code(), arrived


@pytest.mark.parametrize("method", ["Subscribe", "SubscribeBatches"])
def test_a_revoked_token_ends_an_open_subscription_before_it_delivers_more(
    secure_daemon: SecureFactory, method: str
) -> None:
    daemon = secure_daemon()
    token = _reader(daemon, "feed")
    code, arrived = asyncio.run(
        _follow_until_refused(daemon, method, token, "feed", lambda: daemon.remove_token("reader", token))
    )
    assert code is grpc.StatusCode.UNAUTHENTICATED
    assert arrived == [], "records produced after the revocation reached a revoked token"


@pytest.mark.parametrize("method", ["Subscribe", "SubscribeBatches"])
def test_a_removed_acl_ends_an_open_subscription_before_it_delivers_more(
    secure_daemon: SecureFactory, method: str
) -> None:
    daemon = secure_daemon()
    token = _reader(daemon, "feed")
    code, arrived = asyncio.run(_follow_until_refused(daemon, method, token, "feed", daemon.set_acls))
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert arrived == [], "records produced after the ACL was removed reached the stream"


def test_an_idle_subscription_ends_after_a_revocation_without_new_data(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon()
    token = _reader(daemon, "quiet")

    async def scenario() -> grpc.StatusCode:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            call = channel.unary_stream("/lkstream.Broker/Subscribe", response_deserializer=pb.Record.FromString)(
                pb.FetchRequest(topic="quiet", partition=0, offset=1).SerializeToString(),
                metadata=_metadata(token),
                timeout=60,
            )
            await asyncio.sleep(0.5)  # the stream waits for data that never comes
            daemon.remove_token("reader", token)
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await asyncio.wait_for(anext(call.__aiter__()), ENDS_WITHIN_S)
            return ended.value.code()

    assert asyncio.run(scenario()) is grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("streamed", [False, True], ids=["unary", "FetchStream"])
def test_a_long_poll_fetch_delivers_nothing_that_arrives_after_a_revocation(
    secure_daemon: SecureFactory, streamed: bool
) -> None:
    daemon = secure_daemon()
    token = _reader(daemon, "polled")

    async def scenario() -> Any:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            request = pb.FetchRequest(topic="polled", partition=0, offset=1, raw_batches=True, max_wait_ms=20_000)
            if streamed:
                stream = channel.stream_stream(
                    "/lkstream.Broker/FetchStream", response_deserializer=pb.FetchResponse.FromString
                )(iter([request.SerializeToString()]), metadata=_metadata(token), timeout=60)
                answer = asyncio.ensure_future(anext(stream.__aiter__()))
            else:
                fetch = channel.unary_unary("/lkstream.Broker/Fetch", response_deserializer=pb.FetchResponse.FromString)
                answer = asyncio.ensure_future(
                    fetch(request.SerializeToString(), metadata=_metadata(token), timeout=60)
                )
            await asyncio.sleep(1.0)  # the long poll waits
            daemon.remove_token("reader", token)
            with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
                await admin.produce_many("polled", [(None, b"after")])
            try:
                return await asyncio.wait_for(answer, ENDS_WITHIN_S)
            except grpc.aio.AioRpcError as exc:
                return exc.code()

    outcome = asyncio.run(scenario())
    if streamed:
        assert isinstance(outcome, pb.FetchResponse)
        assert not outcome.record_batches, "the long poll delivered a record produced after the revocation"
        assert outcome.error.code == grpc.StatusCode.UNAUTHENTICATED.value[0]
    else:
        assert outcome is grpc.StatusCode.UNAUTHENTICATED


def test_two_hundred_cancelled_subscriptions_log_no_error(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon()
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        admin.create_topic("cancelled", 1)
        admin.produce_many_sync("cancelled", [(None, b"x")])

    async def scenario() -> None:
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            subscribe = channel.unary_stream("/lkstream.Broker/Subscribe", response_deserializer=pb.Record.FromString)
            for _ in range(200):
                call = subscribe(
                    pb.FetchRequest(topic="cancelled", partition=0, offset=0).SerializeToString(),
                    metadata=_metadata(daemon.admin_token),
                    timeout=30,
                )
                await anext(call.__aiter__())  # the stream is served, then the client leaves
                call.cancel()

    asyncio.run(scenario())
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        assert admin.list_topics() == ["cancelled"]  # the daemon served on; its log is complete up to here
    time.sleep(1.0)
    errors = [line for line in daemon.process.output if " ERROR " in line or "Traceback" in line]
    assert errors == [], "".join(errors[:20])


def test_an_http_long_poll_delivers_nothing_that_arrives_after_a_revocation(secure_daemon: SecureFactory) -> None:
    daemon = secure_daemon()
    token = _reader(daemon, "polled")
    body = {"partitions": [{"topic": "polled", "partition": 0, "fetch_offset": 1}], "max_wait_ms": 20_000}

    async def scenario() -> tuple[int, dict[str, Any]]:
        async with aiohttp.ClientSession() as session:
            answer = asyncio.ensure_future(
                session.post(
                    f"{daemon.http_url}/consume", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=60
                )
            )
            await asyncio.sleep(1.0)  # the long poll waits
            daemon.remove_token("reader", token)
            with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
                await admin.produce_many("polled", [(None, b"after")])
            response = await asyncio.wait_for(answer, ENDS_WITHIN_S)
            return response.status, await response.json()

    status, answer = asyncio.run(scenario())
    assert status == 401, answer
    assert "after" not in json.dumps(answer)


def test_concurrent_calls_of_two_principals_never_see_each_others_authority(secure_daemon: SecureFactory) -> None:
    """The call's authority lives in the call's own task: interleaved calls keep their own."""
    daemon = secure_daemon()
    tokens = {user: daemon.token(user) for user in ("alice", "bob")}
    for user in tokens:
        daemon.grant(AclEntry.build(user, "read", "topic", f"{user}.", pattern="prefix"))
    with lkstream.connect(daemon.address, token=daemon.admin_token) as admin:
        for user in tokens:
            admin.create_topic(f"{user}.t", 1)

    async def scenario() -> dict[str, set[tuple[str, ...]]]:
        seen: dict[str, set[tuple[str, ...]]] = {user: set() for user in tokens}
        async with grpc.aio.insecure_channel(daemon.address) as channel:
            admin_call = channel.unary_unary(
                "/lkstream.Broker/Admin", response_deserializer=pb.AdminResponse.FromString
            )
            follow = channel.unary_stream("/lkstream.Broker/Subscribe", response_deserializer=pb.Record.FromString)
            streams = [
                follow(
                    pb.FetchRequest(topic=f"{user}.t", partition=0, offset=0).SerializeToString(),
                    metadata=_metadata(token),
                    timeout=30,
                )
                for user, token in tokens.items()
            ]
            listing = pb.AdminRequest(list_topics=pb.ListTopics()).SerializeToString()

            async def ask(user: str) -> None:
                answer = await admin_call(listing, metadata=_metadata(tokens[user]), timeout=30)
                seen[user].add(tuple(answer.topics))

            await asyncio.gather(*(ask(user) for _ in range(50) for user in tokens))
            for stream in streams:
                stream.cancel()
        return seen

    assert asyncio.run(scenario()) == {"alice": {("alice.t",)}, "bob": {("bob.t",)}}
