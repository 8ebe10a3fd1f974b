"""The lab's side of a user's own job: the handler checked before a run starts
anything, the job's spec, and the cell's verdict against the promise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from testbed.errors import UsageError
from testbed.judge.promises import Promise, parse_promise
from workers.target import USER_JOBS_ENV, TargetError, jobs_env, split

FUNCTION = "workers.userjob.perform"
_CHECK_TIMEOUT = 120.0


def prepare(
    handlers: Sequence[str],
    paths: Sequence[str],
    promise: str = Promise.EXACTLY_ONCE,
    env: dict[str, str] | None = None,
) -> tuple[str, ...]:
    """Check the handlers before anything starts (each must import and name a callable, with
    `env` set as in its work-horses), and have the run's workers preload the job wrapper.
    The paths, absolute."""
    try:
        parse_promise(promise)
        for spec in handlers:
            split(spec)
    except (ValueError, TargetError) as exc:
        raise UsageError(str(exc)) from None
    absolute = tuple(str(Path(p).resolve()) for p in paths)
    for path in absolute:
        if not Path(path).is_dir():
            raise UsageError(f"--path {path} is not a directory")
    if handlers:
        os.environ[USER_JOBS_ENV] = jobs_env(check(handlers, absolute, env or {}))
    return absolute


def check(handlers: Sequence[str], paths: Sequence[str], env: dict[str, str]) -> list[str]:
    """Import the handlers in a process of their own, as a work-horse will (the
    lab never imports users' code); the installed libraries they import."""
    argv = [sys.executable, "-m", "workers.target", *handlers]
    for path in paths:
        argv += ["--path", path]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=_CHECK_TIMEOUT, stdin=subprocess.DEVNULL, env=os.environ | env
        )
    except subprocess.TimeoutExpired:
        raise UsageError(f"importing {', '.join(handlers)} took longer than {_CHECK_TIMEOUT:.0f} s") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise UsageError(lines[-1] if lines else f"importing {', '.join(handlers)} exited with {done.returncode}")
    try:  # the last line: the handlers' own output comes first
        return [str(name) for name in json.loads(done.stdout.strip().splitlines()[-1])]
    except (ValueError, IndexError, TypeError):
        return []


def job_spec(
    prefix: str,
    cell: str,
    handler: str,
    ledger: str,
    provider: str,
    secret: str,
    paths: Sequence[str],
    env: dict[str, str],
) -> dict[str, Any]:
    from workers.userjob import UserJobSpec  # imports rq: only once the run's key prefix is set

    return asdict(UserJobSpec(prefix, cell, handler, ledger, provider, secret, list(paths), dict(env)))
