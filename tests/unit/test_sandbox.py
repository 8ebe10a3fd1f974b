"""A destination's sandbox command, as `--destination-command` takes it, and a sandbox that never answers."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from labcore.procs import free_port
from testbed.errors import SetupError, UsageError
from testbed.infra.sandbox import SandboxCommand, parse_command, placement, sandbox_part
from testbed.usecases.runs import destination_choice

URL = "http://127.0.0.1:5055"
MOTO = "python3 -m moto.server"
LAB = "http://127.0.0.1:{port}"


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


@pytest.mark.parametrize(
    ("url", "command", "placed"),
    [
        (URL, f"{MOTO} -p 5055", (URL, False)),  # the command names its own port
        (None, f"{MOTO} -p {{port}}", (LAB, True)),
        ("http://localhost:{port}/a", f"sh -c '{MOTO} -p {{port}}'", ("http://localhost:{port}/a", True)),
        (None, """sh -c 'echo {"a": {"b": 1}} {}'""", (None, False)),  # a JSON argument's braces are no placeholder
        (URL, None, (URL, False)),  # the user's own destination
        (None, None, (None, False)),
    ],
)
def test_the_port_is_the_lab_s_when_the_command_says_port(
    url: str | None, command: str | None, placed: tuple[str | None, bool]
) -> None:
    assert placement(url, command) == placed


@pytest.mark.parametrize(
    ("url", "command", "said"),
    [
        (LAB, None, f"--destination {LAB}: {{port}} is the lab's port for"),
        (LAB, f"{MOTO} -p 5055", f"--destination {LAB}: --destination-command has no {{port}}"),
        (URL, f"{MOTO} -p {{port}}", f"--destination {URL}: --destination-command takes the lab's {{port}}, so"),
        (None, f"{MOTO} -H {{host}} -p {{port}}", "--destination-command '{host}': no placeholder {host}: the lab"),
        ("http://{host}:{port}", f"{MOTO} -p {{port}}", "--destination 'http://{host}:{port}': no placeholder {host}"),
    ],
)
def test_a_placeholder_the_lab_cannot_fill_is_one_line(url: str | None, command: str | None, said: str) -> None:
    with pytest.raises(UsageError) as raised:
        placement(url, command)
    assert str(raised.value).startswith(said) and "\n" not in str(raised.value)


def test_the_lab_s_port_is_put_in_the_url_and_in_each_argument_after_the_split() -> None:
    choice = destination_choice(None, "m:effects", command=f"sh -c '{MOTO} -p {{port}}; echo \"$0\"' {{port}}")
    assert choice is not None and choice.port is not None
    assert choice.url == f"http://127.0.0.1:{choice.port}"
    sandbox = choice.sandbox()
    assert sandbox is not None
    assert sandbox.argv == ("sh", "-c", f'python3 -m moto.server -p {choice.port}; echo "$0"', str(choice.port))
    assert sandbox.url == choice.url
    # Without {port}, the command and the URL are as given: the form from before.
    given = destination_choice(URL, "m:effects", command=f"{MOTO} -p 5055")
    assert given is not None and given.port is None and given.url == URL


def test_a_sandbox_that_never_answers_is_named_within_its_bound_and_stopped(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    sandbox = sandbox_part(SandboxCommand(("sleep", "600"), url), tmp_path)
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
