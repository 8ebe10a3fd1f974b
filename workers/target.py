"""A user's job function named as `package.module:function`, found the way `rq worker` finds one.

    python -m workers.target SPEC... [--path DIR]...

checks that each SPEC imports and names a callable, before a run starts
anything: one line on stderr with the cause, exit 2. The check runs in its own
process, so the user's module is never imported into the lab (nor rq, whose
key prefix the lab sets first).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from labcore.scoped import PROVIDER_ENV

# Set by a run with users' jobs: its workers preload the job wrapper and the HTTP clients it instruments.
USER_JOBS_ENV = "TESTBED_USER_JOBS"
# What a module that reads its base URL at import time finds during the check.
PLACEHOLDER_URL = "http://127.0.0.1:9/s/import-check"


class TargetError(Exception):
    """The handler cannot be used; the message is one line."""


def split(spec: str) -> tuple[str, str]:
    module, sep, name = spec.partition(":")
    if not sep or not module or not name or any(not part.isidentifier() for part in name.split(".")):
        raise TargetError(f"handler {spec!r} must be MODULE:FUNCTION, e.g. myjobs.email:send")
    return module, name


def add_paths(paths: Sequence[str]) -> None:
    for path in reversed(paths):
        if path not in sys.path:
            sys.path.insert(0, path)


def load(spec: str, paths: Sequence[str] = ()) -> Callable[..., Any]:
    module_name, name = split(spec)
    add_paths(paths)
    try:
        found: Any = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:
        cause = (str(exc).strip().splitlines() or [""])[0]
        raise TargetError(f"handler {spec}: cannot import {module_name}: {type(exc).__name__}: {cause}") from None
    for part in name.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise TargetError(f"handler {spec}: {module_name} has no attribute {name!r}") from None
    if not callable(found):
        raise TargetError(f"handler {spec}: {name} is not callable (it is a {type(found).__name__})")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.target")
    parser.add_argument("specs", nargs="+")
    parser.add_argument("--path", action="append", default=[])
    args = parser.parse_args(argv)
    os.environ.setdefault(PROVIDER_ENV, PLACEHOLDER_URL)
    try:
        for spec in args.specs:
            load(spec, [os.path.abspath(p) for p in args.path])
    except TargetError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
