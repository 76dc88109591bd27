"""``lkstream consume --group G``: the command as a member of consumer group G (as kcat -G and rpk -g).

Invariants:

* **Members split the partitions.** The command subscribes through
  :class:`lkstream.Consumer`, so the group's coordinator assigns each partition of
  the topics to one live member (docs/groups.md): two ``consume --group G`` share
  the work, and one that stops hands its partitions over at once (it leaves the group).
* **A group commits only what was printed.** The consumer commits the positions
  reached by the records of earlier polls, which were printed before the next poll:
  every second, before a partition moves to another member, and when the command ends.
  A record printed and not yet committed when the process is killed is printed
  again by the next member (at-least-once).
* **Where it starts.** Each partition starts at the group's committed offset; one the
  group never committed starts at ``--offset earliest`` (default) or ``latest``.
* **When it stops.** With ``--follow``, on Ctrl-C or ``--num``; without it, once every
  partition it holds is read up to its end.
"""

from __future__ import annotations

from typing import Final, Literal, Protocol

from lkstream.client.consumer import Consumer
from lkstream.client.remote import RemoteBroker
from lkstream.format.codec import Record

#: How long one poll waits for records before the command checks whether it has read everything.
IDLE_POLL_S: Final = 0.5
#: How often printed positions are committed while the command runs (and at every handover and exit).
COMMIT_INTERVAL_MS: Final = 1000
CLIENT_ID: Final = "lkstream-cli"


class Output(Protocol):
    @property
    def done(self) -> bool: ...

    @property
    def remaining(self) -> int | None: ...

    def emit(self, record: Record) -> None: ...


def consume_as_member(
    broker: RemoteBroker,
    topics: list[str],
    group: str,
    output: Output,
    *,
    follow: bool,
    reset: Literal["earliest", "latest"],
) -> None:
    """Print the records of the partitions ``group`` assigns this member, then leave the group."""
    consumer = Consumer(
        broker,
        group=group,
        auto_offset_reset=reset,
        auto_commit_interval_ms=COMMIT_INTERVAL_MS,
        client_id=CLIENT_ID,
    )
    try:
        for topic in topics:
            consumer.subscribe(topic)
        while not output.done:
            records = consumer.poll(IDLE_POLL_S, output.remaining)
            for record in records:
                output.emit(record)
            if not records and not follow and _read_to_the_end(consumer, broker):
                return
    finally:
        consumer.close()  # commits what was printed and leaves the group


def _read_to_the_end(consumer: Consumer, broker: RemoteBroker) -> bool:
    """Whether every partition the member holds is read up to its current end."""
    ends: dict[str, list[int]] = {}
    for topic, pid in consumer.assignment():
        if topic not in ends:
            ends[topic] = [p.high_watermark for p in broker.describe_topic(topic).partitions]
        if pid < len(ends[topic]) and consumer.position(topic, pid) < ends[topic][pid]:
            return False
    return True
