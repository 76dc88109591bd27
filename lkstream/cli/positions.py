"""Where ``lkstream consume`` starts in each partition: kcat's and rpk's offset words, and times.

A **position** (``-o``/``--offset``, alias ``--from``) is one of::

    earliest | start | beginning | oldest     the log start
    latest | end | newest                     the end (only records produced from now on)
    committed | stored                        the --group's committed offset
    N                                         offset N
    -N  or  end-N                             N records before the end (kcat's -o -N)
    +N  or  start+N                           N records after the log start (rpk's -o +N)
    @TIME                                     the first record at or after TIME (kcat's s@, rpk's @)

and an **offset spec** is a position for every partition, or a comma-separated list of
``PARTITION:POSITION`` pairs (``0:100,1:end-5``) that reads those partitions only.
Relative positions are clamped into the partition's current ``[log start, end]``.

A **time** (``--from-timestamp``, ``@TIME``) is milliseconds since the epoch
(``1795663613751``), an ISO 8601 date or date-time (``2026-11-28``, ``2026-11-28T10:00``,
``2026-11-28T10:00:00Z``; local time unless it names a zone), or a duration before now
(``-1h``, ``90m``, ``-1h30m``, ``2d``; units ``ms``, ``s``, ``m``, ``h``, ``d``).

Pure functions over in-memory values, and the click callbacks of the options that take them.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

import click

from lkstream.errors import InvalidArgumentError

Kind = Literal["earliest", "latest", "committed", "offset", "after_start", "before_end", "timestamp"]

_WORDS: Final[dict[str, Kind]] = {
    "earliest": "earliest",
    "start": "earliest",
    "beginning": "earliest",
    "oldest": "earliest",
    "latest": "latest",
    "end": "latest",
    "newest": "latest",
    "committed": "committed",
    "stored": "committed",
}
_RELATIVE: Final = re.compile(r"^(?:(start|beginning|earliest)?\+(\d+)|(end|latest)?-(\d+))$")
_DURATION: Final = re.compile(r"^-?((?:\d+(?:ms|s|m|h|d))+)$")
_DURATION_PART: Final = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
POSITION_HELP: Final = (
    "earliest|start, latest|end, committed, N, -N|end-N (N before the end), +N|start+N (N after the log "
    "start), @TIME; or PARTITION:POSITION,... for chosen partitions only (0:100,1:end-5)"
)
TIME_HELP: Final = (
    "ms since the epoch, an ISO date or date-time (2026-11-28T10:00, local time unless zoned), "
    "or a duration ago (-1h, 90m, 2d)"
)


@dataclass(frozen=True)
class Position:
    """Where to start in one partition; ``value`` is the offset, the count or the time (ms)."""

    kind: Kind
    value: int = 0

    def resolve(self, low: int, high: int, committed: Callable[[], int | None], at_time: Callable[[int], int]) -> int:
        """The offset to start at in a partition holding ``[low, high)``."""
        if self.kind == "earliest":
            return low
        if self.kind == "latest":
            return high
        if self.kind == "committed":
            done = committed()
            # Retention may have deleted past a commit: resume at the oldest record still there.
            return low if done is None else min(max(done, low), high)
        if self.kind == "after_start":
            return min(low + self.value, high)
        if self.kind == "before_end":
            return max(high - self.value, low)
        if self.kind == "timestamp":
            return at_time(self.value)
        return self.value


@dataclass(frozen=True)
class OffsetSpec:
    """A position for every partition (``default``), or positions for chosen partitions only."""

    default: Position | None = None
    per_partition: Mapping[int, Position] = field(default_factory=dict)

    def position(self, pid: int) -> Position | None:
        """Where ``pid`` starts, or None when the spec leaves it out (it is not read)."""
        return self.per_partition.get(pid, self.default) if self.per_partition else self.default

    @property
    def kinds(self) -> set[Kind]:
        positions = [*self.per_partition.values(), *([self.default] if self.default else [])]
        return {p.kind for p in positions}


def parse_position(text: str, *, now_ms: int | None = None) -> Position:
    """One position (see the module docstring); InvalidArgumentError naming what is accepted."""
    word = text.strip().lower()
    if word in _WORDS:
        return Position(_WORDS[word])
    if word.isdigit():
        return Position("offset", int(word))
    relative = _RELATIVE.match(word)
    if relative:
        if relative.group(2) is not None:
            return Position("after_start", int(relative.group(2)))
        return Position("before_end", int(relative.group(4)))
    if word.startswith("@"):
        return Position("timestamp", parse_time(text.strip()[1:], now_ms=now_ms))
    for prefix in ("s@", "e@"):  # kcat's spellings; e@ (stop at) is not a start
        if word.startswith(prefix):
            if prefix == "e@":
                raise InvalidArgumentError(f"{text!r}: stopping at a time (kcat's e@) is not supported; use -n N")
            return Position("timestamp", parse_time(text.strip()[2:], now_ms=now_ms))
    raise InvalidArgumentError(f"{text!r} is not a position: {POSITION_HELP}")


def parse_offset_spec(text: str, *, now_ms: int | None = None) -> OffsetSpec:
    """A position for every partition, or ``PARTITION:POSITION[,PARTITION:POSITION...]``."""
    if ":" not in text:
        return OffsetSpec(default=parse_position(text, now_ms=now_ms))
    chosen: dict[int, Position] = {}
    for item in text.split(","):
        pid, sep, where = item.strip().partition(":")
        if not sep or not pid.strip().isdigit():
            raise InvalidArgumentError(f"{item!r} is not PARTITION:POSITION (e.g. 0:100 or 1:end-5)")
        if int(pid) in chosen:
            raise InvalidArgumentError(f"partition {int(pid)} is given twice in {text!r}")
        chosen[int(pid)] = parse_position(where, now_ms=now_ms)
    return OffsetSpec(per_partition=chosen)


def parse_time(text: str, *, now_ms: int | None = None) -> int:
    """Milliseconds since the epoch from ms, an ISO date or date-time, or a duration before now."""
    raw = text.strip()
    if raw.isdigit():
        return int(raw)
    duration = _DURATION.match(raw.lower())
    if duration:
        ago = sum(int(n) * _UNIT_MS[unit] for n, unit in _DURATION_PART.findall(duration.group(1)))
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return max(0, now - ago)
    try:
        moment = dt.datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError:
        raise InvalidArgumentError(f"{text!r} is not a time: {TIME_HELP}") from None
    # A naive date-time is local time, as `date` and a user's clock read it.
    return int(moment.timestamp() * 1000)


# -- as click option callbacks ------------------------------------------------------------------------


def time_value(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """An option's TIME (:func:`parse_time`) in ms, or a usage error saying what a time may be."""
    if value is None:
        return None
    try:
        return parse_time(value)
    except InvalidArgumentError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def offset_spec_value(ctx: click.Context, param: click.Parameter, value: str | None) -> OffsetSpec | None:
    """An option's POSITION or PARTITION:POSITION list (:func:`parse_offset_spec`), or a usage error."""
    if value is None:
        return None
    try:
        return parse_offset_spec(value)
    except InvalidArgumentError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
