"""A destination's evidence for one cell, read by the user's reader in a process of its own:

    python -m workers.evidence SPEC DESTINATION_URL [--path DIR]...  < op-ids.json

calls `function(destination_url, op_ids)` (SPEC is `module:function`) with the op ids
read from stdin (a JSON list) and prints its answer, JSON, as the last line of stdout.
A reader that raises says so in one line on stderr and exits 1. The lab bounds the
process in time (`testbed.lab.destination`) and judges the answer's shape itself, so
that the user's code is never imported into the lab.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from workers.specs import TargetError, load


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.evidence")
    parser.add_argument("spec")
    parser.add_argument("url")
    parser.add_argument("--path", action="append", default=[])
    args = parser.parse_args(argv)
    op_ids = json.load(sys.stdin)
    try:
        reader = load(args.spec, args.path)
    except TargetError as exc:
        print(exc, file=sys.stderr)
        return 1
    try:
        answer = reader(args.url, op_ids)
        line = json.dumps(answer)
    except Exception as exc:
        cause = (str(exc).strip().splitlines() or [""])[0]
        print(f"{type(exc).__name__}: {cause}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    print(f"\n{line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
