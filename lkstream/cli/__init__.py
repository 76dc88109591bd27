"""The ``lkstream`` command line: one click group (:mod:`lkstream.cli.base`), one module per command.

::

    lkstream serve                                lkstream.cli.daemon  (run the daemon)
    lkstream produce                              lkstream.cli.produce (to a daemon or a data dir)
    lkstream consume                              lkstream.cli.consume (from a daemon or a data dir, offline)
    lkstream bench produce|consume                lkstream.cli.bench   (a quick self-benchmark)
    lkstream topics create|list|describe|delete   lkstream.cli.topics  (topic admin)
    lkstream dump | verify                        lkstream.cli.offline (read a data directory)
    lkstream backup | restore                     lkstream.cli.backup  (online snapshot of a data directory)
    lkstream bridge                               lkstream.cli.bridge  (copy topics into Kafka)
    lkstream groups list|describe|reset|delete    lkstream.cli.groups  (consumer group admin)
    lkstream cluster info                         lkstream.cli.cluster (the daemon, described)
    lkstream topics copy                          lkstream.cli.copy    (a topic into another, records as they are)
    lkstream users add|remove|list                lkstream.cli.users   (users, passwords, tokens)
    lkstream acls add|remove|list                 lkstream.cli.acls    (access control lists)

Importing this package registers every command on :data:`cli`; ``main`` is the
``lkstream`` script's entry point (``lkstream.cli:main``) and ``python -m lkstream.cli``.
Exit status: 0 success, 1 failure (an error from the broker or the daemon, a bad
input line, corruption found), 2 usage (see :mod:`lkstream.cli.base`).
"""

from lkstream.cli import (
    acls,
    backup,
    bench,
    bridge,
    cluster,
    consume,
    copy,
    daemon,
    groups,
    offline,
    produce,
    topics,
    users,
)
from lkstream.cli.base import cli, main, render_bytes

__all__ = [
    "acls",
    "backup",
    "bench",
    "bridge",
    "cli",
    "cluster",
    "consume",
    "copy",
    "daemon",
    "groups",
    "main",
    "offline",
    "produce",
    "render_bytes",
    "topics",
    "users",
]
