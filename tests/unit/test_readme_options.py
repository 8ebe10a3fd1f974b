"""The README's options table and `testbed chaos --help` name the same options."""

import re
from pathlib import Path

import typer

from testbed.cli.app import app

README = Path(__file__).resolve().parents[2] / "README.md"


def documented() -> set[str]:
    text = README.read_text()
    table = text.split("## Options", 1)[1].split("\n\n`testbed replay`", 1)[0]
    return {
        name
        for line in table.splitlines()
        if line.startswith("| `")
        for name in re.findall(r"--[\w-]+", line.split("|")[1])
    }


def offered(command: str) -> set[str]:
    click_app = typer.main.get_command(app)
    params = click_app.commands[command].params  # type: ignore[attr-defined]
    return {opt for p in params for opt in p.opts if opt.startswith("--") and opt != "--help"}


def test_the_readme_lists_every_option_of_chaos_and_no_other():
    assert documented() == offered("chaos")
