"""The lab's side of a user's own job: the handler checked before a run starts
anything, the job's spec, and the cell's verdict against the promise."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from labcore import procs
from labcore.destination import Destination
from testbed import inputs
from testbed.errors import UsageError
from testbed.judge.promises import Promise, parse_promise
from workers.specs import SHAPE, USER_JOB, USER_JOBS_ENV, TargetError, jobs_env, split

FUNCTION = USER_JOB
IMPORT_TIMEOUT = 30.0  # seconds the handlers' import check may take (--import-timeout)
_MAX_IMPORT_TIMEOUT = 3600.0
_TAIL = 65_536  # bytes of the check's output read back: its last lines are the lab's
_SAID = 2 * inputs.QUOTED  # characters of its last line an error line repeats


def prepare(
    handlers: Sequence[str],
    paths: Sequence[str],
    promise: str = Promise.EXACTLY_ONCE,
    env: dict[str, str] | None = None,
    import_timeout: float = IMPORT_TIMEOUT,
    engine: str = "rq",
    app: str | None = None,
    plugins: Sequence[str] = (),
) -> tuple[str, ...]:
    """Check the handlers before anything starts (each must import, within `import_timeout`
    seconds, and name a callable, with `env` set as in its work-horses), and have the run's
    workers preload the job wrapper. With a user's `app`, each handler must be a task of
    that app of the `engine`'s, and each of `plugins` a plugin of the engine's client. The paths, absolute."""
    if not 0 < import_timeout <= _MAX_IMPORT_TIMEOUT:  # also NaN
        raise UsageError(f"--import-timeout must be a number of seconds in (0, {_MAX_IMPORT_TIMEOUT:.0f}]")
    try:
        parse_promise(promise)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for spec in [*handlers, *([app] if app else []), *plugins]:
        try:
            split(spec)
        except TargetError:
            raise UsageError(f"handler {inputs.quoted(repr(spec))} {SHAPE}") from None
    absolute = tuple(str(Path(p).resolve()) for p in paths)
    for path in absolute:
        if not Path(path).is_dir():
            raise UsageError(f"--path {path} is not a directory")
    if handlers:
        libraries = check(handlers, absolute, env or {}, import_timeout, engine, app, plugins)
        os.environ[USER_JOBS_ENV] = jobs_env(libraries)
    return absolute


def check(
    handlers: Sequence[str],
    paths: Sequence[str],
    env: dict[str, str],
    timeout: float,
    engine: str = "rq",
    app: str | None = None,
    plugins: Sequence[str] = (),
) -> list[str]:
    """Import the handlers in a process of their own, as a work-horse will (the
    lab never imports users' code); the installed libraries they import. The check
    runs in a process group of its own, stopped whole once it is over or past its
    deadline, with every process below it (a daemon in a session of its own included):
    a module that loops, or leaves a process behind, at import holds up nothing. Its
    output goes to files, not pipes, which such a process would hold open."""
    argv = [sys.executable, "-m", "workers.importcheck", *handlers]
    for path in paths:
        argv += ["--path", path]
    if app:
        argv += ["--engine", engine, "--app", app]
    for plugin in plugins:
        argv += ["--plugin", plugin]
    named = inputs.quoted(", ".join(handlers))
    code, stdout, stderr = bounded(argv, os.environ | env, timeout)
    if code is None:
        raise UsageError(f"importing {named} took longer than {timeout:g} s (--import-timeout)")
    if code != 0:
        lines = stderr.strip().splitlines()
        # It repeats the spec, and the module's own words: a few hundred characters of them at most.
        raise UsageError(inputs.quoted(lines[-1], _SAID) if lines else f"importing {named} exited with {code}")
    try:  # the last line: the handlers' own output comes first
        return [str(name) for name in json.loads(stdout.strip().splitlines()[-1])]
    except (ValueError, IndexError, TypeError):
        return []


def bounded(
    argv: Sequence[str], env: Mapping[str, str], timeout: float, stdin: bytes = b"", keep: int = _TAIL
) -> tuple[int | None, str, str]:
    """Run a process of the lab's over a user's code (the import check, an evidence reader)
    in a process group of its own, stopped whole once it is over or past `timeout` seconds:
    its exit code (None: it ran past its time), and the last `keep` bytes of its stdout and stderr."""
    with tempfile.TemporaryFile() as given, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        given.write(stdin)
        given.seek(0)
        proc = subprocess.Popen(argv, stdin=given, stdout=out, stderr=err, env=dict(env), process_group=0)
        try:
            code: int | None = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            _stop_group(proc)
        return code, _tail(out, keep), _tail(err, keep)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """The process and whatever the user's code started under it, SIGKILLed; the process
    reaped. The import check, ended, stopped what it started itself (`workers.importcheck`);
    past its deadline it adopts what its module started, in whatever session, so everything
    below it is stopped while it lives, as the orphans of each kill come to it. Its group
    outlives it while a member does, so its id names no other group then."""
    while procs.stop_descendants(proc.pid, grace=0):  # the dead stay as its zombies: not counted again
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _tail(file: IO[bytes], keep: int) -> str:
    """The end of what the check wrote: a module that prints at import may print a lot."""
    size = file.seek(0, os.SEEK_END)
    file.seek(max(0, size - keep))
    return file.read().decode(errors="replace")


def job_spec(
    prefix: str,
    cell: str,
    handler: str,
    ledger: str,
    provider: str,
    paths: Sequence[str],
    env: dict[str, str],
    destination: Destination | None = None,
    mail_relay: str | None = None,
) -> dict[str, Any]:
    """`destination`: the run's real one, whose effect rules the work-horse applies too (its boundaries)."""
    from workers.userjob import UserJobSpec  # imports rq: only once the run's key prefix is set

    # An SMTP destination's messages are all effects: no rules for the worker's clients to match.
    effects = None if destination is None or destination.is_mail else destination.effects.spelled()
    spec = UserJobSpec(prefix, cell, handler, ledger, provider, list(paths), dict(env), effects, mail_relay)
    return asdict(spec)
