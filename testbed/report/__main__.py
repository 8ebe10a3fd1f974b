"""A stand-alone entry to the stored-run renderers, until the CLI has `testbed report`:

python -m testbed.report RESULTS.json [--html PATH] [--events EVENTS.jsonl] [--junit PATH] [--compare OTHER.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testbed.report import compare, html, junit


def _fail(message: str) -> None:
    print(f"testbed: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _load(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        _fail(f"cannot read results {path}: {e}")
    if not isinstance(document, dict) or not isinstance(document.get("rows"), list):
        _fail(f"{path} is not a results document (no rows)")
    return document


def _events(path: Path) -> Iterator[dict[str, Any]]:
    """The event stream, a line at a time (a long run's stream need not fit in memory)."""
    with path.open() as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError as e:
                    _fail(f"{path}:{number}: not JSON: {e}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.report", description=__doc__)
    parser.add_argument("results", type=Path)
    parser.add_argument("--html", type=Path, help="write the report page here")
    parser.add_argument("--events", type=Path, help="the run's event stream (JSON Lines)")
    parser.add_argument("--junit", type=Path, help="write JUnit XML here")
    parser.add_argument("--compare", type=Path, metavar="OTHER", help="print the cells that differ from OTHER")
    args = parser.parse_args(argv)
    results = _load(args.results)
    if args.events is not None and not args.events.is_file():
        _fail(f"no event stream at {args.events}")
    if args.html is not None:
        page = html.render(results, _events(args.events) if args.events else None)
        args.html.write_text(page)
        print(f"report in {args.html}")
    if args.junit is not None:
        junit.write_junit(args.junit, results)
        print(f"JUnit XML in {args.junit}")
    if args.compare is not None:
        other = _load(args.compare)
        print(compare.render_text(compare.compare(results, other), str(args.results), str(args.compare)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
