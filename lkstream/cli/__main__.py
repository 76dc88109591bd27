"""``python -m lkstream.cli``: the ``lkstream`` command line."""

from lkstream.cli import main

main()
