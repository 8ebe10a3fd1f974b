"""The command line explains itself the same way everywhere: placeholders, and where to look after a mistake."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

import testbed.cli.app as cli
from testbed.cli.base import app

COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_that_takes_a_value_names_it_in_capitals(command: str) -> None:
    shown = CliRunner().invoke(app, [command, "-h"], terminal_width=200).output
    options = [line for line in shown.splitlines() if line.strip().startswith("-")]
    assert options, shown
    lowercase = [line.strip() for line in options if re.search(r"<[a-z]+>", line)]
    assert lowercase == [], f"testbed {command}: placeholders not in capitals: {lowercase}"


def test_a_usage_error_says_where_to_look(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["compare"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == "testbed: error: Missing argument 'RUN_A' (see testbed compare -h)\n"
