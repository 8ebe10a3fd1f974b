"""The `testbed` command's Typer app, which every command module registers with."""

from __future__ import annotations

from typing import Annotated

import typer

# explore: a counterexample that failed once and in none of its confirming runs (--confirm).
EXIT_UNCONFIRMED = 4

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    help="A crash-test lab for the side effects of agent tool calls and queue jobs: real Redis, RQ workers,"
    " SIGKILLs at named boundaries, and a provider process whose log is the judge.",
    epilog="Exit codes: 0 every cell as expected; 1 a cell differs; 2 bad input; 3 the stack failed;"
    " 4 explore's counterexample did not reproduce (unconfirmed); 130 interrupted.",
)


def _show_version(given: bool) -> None:
    if given:
        from testbed.lab.session import package_version

        print(f"testbed {package_version('testbed')}")
        raise typer.Exit(0)


@app.callback()
def _root(
    _version: Annotated[
        bool, typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """A crash-test lab for the side effects of agent tool calls and queue jobs."""


def examples(*lines: str) -> str:
    """An epilog of examples, kept as written (click rewraps paragraphs otherwise)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)
