"""Summarise a collapsed-stack profile (``py-spy record --format raw``): self and inclusive shares.

    py-spy record --rate 500 --format raw -o prof.txt -- python -m benchmarks.e2e....
    python -m benchmarks.tools.stacks prof.txt [--under FRAME_SUBSTRING] [--top N]

``--under`` keeps only the stacks that contain a frame matching the substring (e.g. the
benchmark function of one scenario), so set-up work does not dilute the figures.
"""

from __future__ import annotations

import argparse
from collections import Counter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path")
    parser.add_argument("--under", default="", help="only stacks containing this frame substring")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    with open(args.path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack or (args.under and args.under not in stack):
                continue
            n = int(count)
            frames = stack.split(";")
            total += n
            own[frames[-1]] += n
            for frame in set(frames):
                inclusive[frame] += n
    print(f"{total} samples" + (f" under {args.under!r}" if args.under else ""))
    for title, counter in (("self", own), ("inclusive", inclusive)):
        print(f"-- {title}")
        for frame, n in counter.most_common(args.top):
            print(f"{100 * n / max(total, 1):5.1f}%  {frame}")


if __name__ == "__main__":
    main()
