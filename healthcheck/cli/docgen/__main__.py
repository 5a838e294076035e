"""python -m healthcheck.cli.docgen [--check] [--root DIR]: see the package's docstring."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from healthcheck.cli.docgen import checkout_root, stale, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m healthcheck.cli.docgen",
                                     description="Write (or --check) the docs pages generated from the code.")
    parser.add_argument("--check", action="store_true", help="exit 1 naming each stale page; write nothing")
    parser.add_argument("--root", type=Path, default=None, help="the checkout (default: the one hc runs from)")
    args = parser.parse_args(argv)
    root = args.root or checkout_root()
    if not (root / "docs").is_dir():
        print(f"docgen: {root}/docs is not a directory: run this from a checkout of hc", file=sys.stderr)
        return 4
    if args.check:
        pages = stale(root)
        for page in pages:
            print(f"docgen: {page} is stale: run `python -m healthcheck.cli.docgen`", file=sys.stderr)
        return 1 if pages else 0
    for page in write(root):
        print(f"docgen: wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
