"""A destination's sandbox command, as `--destination-command` takes it, and a sandbox that never answers."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from labcore.procs import free_port
from testbed.errors import SetupError, UsageError
from testbed.infra.sandbox import Sandbox, SandboxCommand, parse_command

URL = "http://127.0.0.1:5055"


def test_a_command_is_split_as_a_shell_would() -> None:
    command = parse_command("sh -c 'moto_server -p 5055 && echo \"done\"' --flag\\ x", URL)
    assert command.argv == ("sh", "-c", 'moto_server -p 5055 && echo "done"', "--flag x")
    assert parse_command(command.spelled, URL) == command  # said back as it was read


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("moto_server -p '5055", '--destination-command "moto_server -p \'5055": no closing quotation'),
        ("   ", "--destination-command is empty: give the command that starts your sandbox"),
        ("no-such-program-here -p 1", "--destination-command 'no-such-program-here -p 1': no program"),
    ],
)
def test_a_command_that_cannot_run_is_one_line(text: str, said: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_command(text, URL)
    assert str(raised.value).startswith(said) and "\n" not in str(raised.value)


def test_a_sandbox_that_never_answers_is_named_within_its_bound_and_stopped(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    sandbox = Sandbox(SandboxCommand(("sleep", "600"), url), tmp_path)
    sandbox.launch()
    pid = sandbox.pid
    assert pid is not None
    try:
        with pytest.raises(
            SetupError,
            match=rf"the destination's sandbox \(sleep 600\) did not answer at --destination {url} within 0 s",
        ):
            sandbox.wait_ready(timeout=0.2)
    finally:
        sandbox.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_sandbox_is_not_started_for_a_provider_on_another_host() -> None:
    from testbed.infra.stack import RemoteOptions, StackOptions
    from testbed.lab.destination import DestinationChoice
    from testbed.usecases.runs import Jobs

    jobs = Jobs(("m:f",), destination=DestinationChoice(URL, "m:effects", command="sh -c 'exit 0'"))
    assert jobs.with_sandbox(StackOptions()).sandbox == SandboxCommand(("sh", "-c", "exit 0"), URL)
    with pytest.raises(UsageError, match="--destination-command with --hosts: the provider on another host"):
        jobs.with_sandbox(StackOptions(remote=RemoteOptions("http://10.0.0.2:8000", None)))
