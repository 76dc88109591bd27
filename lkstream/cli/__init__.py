"""The ``lkstream`` command line: one click group (:mod:`lkstream.cli.base`), one function per command.

::

    lkstream serve | produce | consume     lkstream.cli.daemon  (run or talk to a daemon)
    lkstream dump | verify                 lkstream.cli.offline (read a data directory)
    lkstream topics create|list|describe|delete   lkstream.cli.topics (topic admin)

Importing this package registers every command on :data:`cli`; ``main`` is the
``lkstream`` script's entry point (``lkstream.cli:main``) and ``python -m lkstream.cli``.
Exit status: 0 success, 1 failure (an error from the daemon, corruption found), 2 usage.
"""

from lkstream.cli import daemon, offline, topics
from lkstream.cli.base import cli, main, render_bytes

__all__ = ["cli", "daemon", "main", "offline", "render_bytes", "topics"]
