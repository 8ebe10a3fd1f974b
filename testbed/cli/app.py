"""The command line: every input checked before anything starts, then a thin
layer over the lab. Exit codes: 0 every cell as expected; 1 a cell differs
from its expectation (or, under load, breaks a promise); 2 bad input or an
environment the run cannot start in; 3 the stack failed during the run;
4 explore's counterexample did not reproduce in its confirming runs
(unconfirmed); 130 interrupted."""

from __future__ import annotations

import signal
import sys
from typing import NoReturn

import typer

from testbed.cli import chaos, explore, hosts, load, replay, serve, stored  # noqa: F401  (each registers its commands)
from testbed.cli.base import app
from testbed.errors import Interrupted, RunFailure, SetupError

hosts.register(app)  # host, redis: the lab across hosts


def _fail(message: str, code: int) -> NoReturn:
    print(f"testbed: error: {message}", file=sys.stderr)
    sys.exit(code)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _usage_error(exc: typer.TyperException) -> str:
    """The parser's message on one line, with where to look: `Missing argument 'RUN_A' (see testbed compare -h)`."""
    message = exc.format_message().replace("\n", " ").rstrip(".")
    context = getattr(exc, "ctx", None)
    return f"{message} (see {context.command_path} -h)" if context is not None else message


def main(argv: list[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, _interrupt)
    command = typer.main.get_command(app)
    args = sys.argv[1:] if argv is None else argv
    try:
        # A bare `testbed` shows what it can do.
        code = command.main(args=args or ["--help"], prog_name="testbed", standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (Interrupted, KeyboardInterrupt, typer.Abort):
        _fail("interrupted; everything the run started has been stopped", 130)
    except typer.TyperException as exc:  # the parser's own usage errors
        _fail(_usage_error(exc), exc.exit_code)
    except SetupError as exc:
        _fail(str(exc), 2)
    except RunFailure as exc:
        _fail(str(exc), 3)
    sys.exit(code if isinstance(code, int) else 0)
