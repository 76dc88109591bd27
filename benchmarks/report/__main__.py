"""``python -m benchmarks.report``: check or rewrite the generated tables of docs/benchmarks.md.

python -m benchmarks.report                      # exit 1 if a table differs from its result files
python -m benchmarks.report --write              # rewrite every table from its files
python -m benchmarks.report --write --from benchmarks/results/peers-<stamp>.json   # a new run enters
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from benchmarks.report.page import PAGE, PageError, missing, regenerate, repoint, uncited


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--page", default=str(PAGE), help="the Markdown page (default docs/benchmarks.md)")
    parser.add_argument("--write", action="store_true", help="rewrite the tables instead of checking them")
    parser.add_argument(
        "--from",
        dest="new",
        action="append",
        default=[],
        metavar="RESULT",
        help="point the tables citing a result of this one's kind at it first (repeatable; implies --write)",
    )
    args = parser.parse_args(argv)
    page = Path(args.page)
    root = page.resolve().parents[1]  # the page is <root>/docs/<name>.md; cited paths are from <root>
    text = page.read_text()
    try:
        wanted = text
        for new in args.new:
            wanted = repoint(wanted, str(Path(new).resolve().relative_to(root)))
        wanted = regenerate(wanted, root)
    except PageError as exc:
        print(f"{page}: {exc}", file=sys.stderr)
        return 2
    status = 0
    if args.write or args.new:
        page.write_text(wanted)
    elif wanted != text:
        sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), wanted.splitlines(True), str(page), "tables"))
        print(f"{page}: tables differ from their result files; `python -m benchmarks.report --write`", file=sys.stderr)
        status = 1
    for name in uncited(root):
        print(f"not cited by any page (git rm it): benchmarks/results/{name}", file=sys.stderr)
    for name in missing(root):
        print(f"cited but not in the tree: benchmarks/results/{name}", file=sys.stderr)
        status = status or 1
    return status


if __name__ == "__main__":
    sys.exit(main())
