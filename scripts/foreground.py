"""Run a command as the terminal's foreground process group, so that Ctrl-C reaches it alone.

``make run`` runs the daemon through it. A terminal sends Ctrl-C's SIGINT to its whole
foreground process group, make included, and GNU make re-raises a SIGINT it received
whatever its child did: ``make: *** [Makefile:NN: run] Interrupt`` and exit status 130,
although the daemon stopped cleanly and exited 0. In a process group of its own that owns
the terminal, the command alone gets Ctrl-C; it exits 0, and so does make.

Job control still works: when the command is stopped (Ctrl-Z) the terminal goes back to
make's group and that group is stopped too, so the shell sees its job stopped; ``fg``
gives the terminal back to the command and continues it, ``bg`` continues it in the
background. SIGTERM and SIGHUP sent to this process are passed on.

Without a terminal in the foreground (a pipe, CI, a test's process group), or where
process groups are not available, it simply execs the command.

Usage: ``python scripts/foreground.py COMMAND [ARG...]``; the exit status is the
command's (128 + N when signal N ended it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from types import FrameType

FORWARDED = (signal.SIGTERM, signal.SIGHUP)


def foreground_terminal() -> int | None:
    """stdin's descriptor when it is a terminal whose foreground group is this process's, else None."""
    try:
        tty = sys.stdin.fileno()
        return tty if os.isatty(tty) and os.tcgetpgrp(tty) == os.getpgrp() else None
    except (OSError, ValueError):
        return None


def give_terminal(tty: int, group: int) -> None:
    """Make ``group`` the terminal's foreground group (SIGTTOU is ignored: this process may be in the background)."""
    with contextlib.suppress(OSError):  # the terminal went away (hangup): nothing left to give
        os.tcsetpgrp(tty, group)


def exit_status(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def run(command: list[str], tty: int) -> int:
    own_group = os.getpgrp()
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    child = subprocess.Popen(command, process_group=0)

    def forward(signum: int, frame: FrameType | None) -> None:
        os.killpg(child.pid, signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    give_terminal(tty, child.pid)
    try:
        while True:
            _, status = os.waitpid(child.pid, os.WUNTRACED)
            if not os.WIFSTOPPED(status):
                return exit_status(status)
            # Ctrl-Z: stop make's group (this process included) so the shell sees the job stopped.
            give_terminal(tty, own_group)
            os.killpg(own_group, signal.SIGTSTP)
            # Continued: `fg` gave the terminal back to make's group, `bg` did not.
            if os.tcgetpgrp(tty) == own_group:
                give_terminal(tty, child.pid)
            os.killpg(child.pid, signal.SIGCONT)
    finally:
        give_terminal(tty, own_group)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python scripts/foreground.py COMMAND [ARG...]", file=sys.stderr)
        return 2
    command = argv[1:]
    tty = foreground_terminal()
    if tty is None:
        os.execvp(command[0], command)
    return run(command, tty)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
