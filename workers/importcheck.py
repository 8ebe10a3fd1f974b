"""The handlers' import check, before a run starts anything:

    python -m workers.importcheck SPEC... [--path DIR]... [--engine NAME --app APP [--plugin P]...]

checks that each SPEC imports and names a callable (with --app: a task of that app of the
engine's, and each P a plugin of the engine's client): one line on stderr with the cause,
exit 2; otherwise it prints the installed libraries the handlers imported (JSON), for the
workers to preload. It runs in its own process, so the user's module is never imported into
the lab (nor rq, whose key prefix the lab sets first).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from labcore.prctl import adopt_orphans, stop_adopted
from labcore.scoped import PROVIDER_ENV
from workers import engines
from workers.specs import PLACEHOLDER_URL, TargetError, find, libraries_loaded_by, load


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.importcheck")
    parser.add_argument("specs", nargs="+")
    parser.add_argument("--path", action="append", default=[])
    parser.add_argument("--engine", default="rq", help="the engine whose app --app is")
    parser.add_argument("--app", help="the app whose tasks the SPECs must be")
    parser.add_argument("--plugin", action="append", default=[], help="a plugin of the engine's client, with --app")
    args = parser.parse_args(argv)
    os.environ.setdefault(PROVIDER_ENV, PLACEHOLDER_URL)
    paths = [os.path.abspath(p) for p in args.path]
    # A process a module starts at import, in a session of its own or not, stays below this one
    # (its parent gone, it is adopted here) and is stopped as the check ends: the lab stops only
    # the check's process group, and, past the deadline, what is below the check.
    adopt_orphans()
    try:
        libraries = libraries_loaded_by(args.specs, paths)
        if args.app:
            tasks = {spec: load(spec, paths) for spec in args.specs}
            side = engines.side(args.engine)
            if (why := side.check_tasks(args.app, find(args.app, paths), tasks)) is not None:
                raise TargetError(why)
            plugins = {spec: find(spec, paths) for spec in args.plugin}
            if plugins and (why := side.check_plugins(plugins)) is not None:
                raise TargetError(why)
    except TargetError as exc:
        print(exc, file=sys.stderr)
        return 2
    finally:
        stop_adopted()
    print(json.dumps(libraries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
