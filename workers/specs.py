"""A user's job function named as `package.module:function`, found the way `rq worker` finds
one, and the installed libraries it brings, which the workers preload (`preload`). The check
that a run's handlers can be found runs in a process of its own (`workers.importcheck`)."""

from __future__ import annotations

import importlib
import json
import os
import sys
import sysconfig
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, cast

# Set by a run with users' jobs (`jobs_env`): its workers preload the job wrapper, the HTTP
# clients it instruments, and the libraries the handlers import (`preload`).
USER_JOBS_ENV = "TESTBED_USER_JOBS"
# The RQ job function that runs a user's function for one attempt (`workers.userjob.perform`).
USER_JOB = "workers.userjob.perform"
# The lab's built-in job (`workers.handler.perform`), named here so that naming it imports neither RQ nor the handler.
HANDLER = "workers.handler.perform"
# What a module that reads its base URL at import time finds during the check.
PLACEHOLDER_URL = "http://127.0.0.1:9/s/import-check"


class TargetError(Exception):
    """The handler cannot be used; the message is one line."""


SHAPE = "must be MODULE:FUNCTION, e.g. myjobs.email:send"  # what `split` says of a spec that is not one


def split(spec: str) -> tuple[str, str]:
    module, sep, name = spec.partition(":")
    if not sep or not module or not name or any(not part.isidentifier() for part in name.split(".")):
        raise TargetError(f"handler {spec!r} {SHAPE}")
    if any(c.isspace() or not c.isprintable() for c in module):  # no module's name: a newline would split its errors
        raise TargetError(f"handler {spec!r} {SHAPE}")
    return module, name


def add_paths(paths: Sequence[str]) -> None:
    for path in reversed(paths):
        if path not in sys.path:
            sys.path.insert(0, path)


def load(spec: str, paths: Sequence[str] = ()) -> Callable[..., Any]:
    found = find(spec, paths)
    if not callable(found):
        _, name = split(spec)
        raise TargetError(f"handler {spec}: {name} is not callable (it is a {type(found).__name__})")
    return cast(Callable[..., Any], found)


def find(spec: str, paths: Sequence[str] = ()) -> Any:
    """What `package.module:attribute` names, imported as a worker imports it."""
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
    return found


def jobs_env(libraries: Sequence[str]) -> str:
    return json.dumps({"preload": list(libraries)})


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple({os.path.join(os.path.realpath(paths[n]), "") for n in ("stdlib", "platstdlib", "purelib", "platlib")})


def _is_library(module: ModuleType, dirs: tuple[str, ...]) -> bool:
    """Installed (standard library or site-packages), not the user's own code."""
    where = getattr(module, "__file__", None)
    places = [where] if where else list(getattr(module, "__path__", []))
    return bool(places) and all(os.path.realpath(p).startswith(dirs) for p in places)


def libraries_loaded_by(specs: Sequence[str], paths: Sequence[str]) -> list[str]:
    """Load the handlers; the installed modules that came with them, in the order they came."""
    before = set(sys.modules)
    for spec in specs:
        load(spec, paths)
    dirs = _library_dirs()
    return [name for name, module in list(sys.modules.items()) if name not in before and _is_library(module, dirs)]


def preload(value: str) -> None:
    """In the worker, before it forks any work-horse: import the libraries the handlers
    import (found by the check, in its own process), never the user's code. Each work-horse
    imports the user's module anew, as `rq worker` does (a module that reads its
    environment at import sees the job's), and finds its libraries loaded, as in a worker
    that preloads them. A library that fails here is left to the work-horse to report."""
    for name in json.loads(value).get("preload", []):
        try:
            importlib.import_module(name)
        except (Exception, SystemExit):
            continue
