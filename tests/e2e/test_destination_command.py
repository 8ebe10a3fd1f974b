"""The destination's sandbox as a part of the stack (`--destination-command`): moto's server
started by the lab, waited for, watched, and stopped with all it started, whatever ends the run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from labcore.procs import free_port
from tests.support.helpers import (
    Ran,
    assert_left_nothing,
    descendants,
    finish,
    run_testbed,
    start_testbed,
)

pytestmark = pytest.mark.e2e

MOTO = str(Path(sys.executable).with_name("moto_server"))
SQS = ["--destination-effect", "X-Amz-Target: AmazonSQS.SendMessage", "--evidence", "examples.sqs_fifo:effects"]


@pytest.fixture(autouse=True)
def queue(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    monkeypatch.setenv("SQS_QUEUE", f"{request.node.name[:60]}.fifo")


@pytest.fixture
def port() -> int:
    return free_port()


def started_by_the_lab(port: int, command: str | None = None) -> list[str]:
    url = f"http://127.0.0.1:{port}"
    spelled = command or f"{MOTO} -H 127.0.0.1 -p {port}"
    return ["--handler", "examples.sqs_fifo:keyed", "--destination", url, "--destination-command", spelled, *SQS]


def answers(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}", timeout=1)
    except httpx.HTTPError:
        return False
    return True


def below(pid: int, running: Callable[[list[str]], bool]) -> Iterator[psutil.Process]:
    """The processes below a testbed process whose command line is one of these (those that went meanwhile left out)."""
    for child in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if running(child.cmdline()):
                yield child


def sandboxes(pid: int) -> Iterator[psutil.Process]:
    """moto's servers below a testbed process."""
    return below(pid, lambda argv: any(part.endswith("/moto_server") for part in argv))


def test_the_lab_starts_the_sandbox_judges_against_it_and_stops_it(workdir: Path, port: int) -> None:
    store = workdir / "runs"
    args = [*started_by_the_lab(port), "--ops", "10", "-b", "none", "-b", "after-effect", "--store", str(store)]
    ran = run_testbed(args, workdir, timeout=300)
    assert ran.code == 0, ran.stderr
    assert [(row["boundary"], row["effects"], row["missingOperations"]) for row in ran.json["rows"]] == [
        ("none", 10, 0),
        ("after-effect", 10, 0),
    ]
    assert ran.json["options"]["destinationCommand"] == f"{MOTO} -H 127.0.0.1 -p {port}"
    # Its output went to the run's logs, not to the terminal.
    log = (store / "latest" / "logs" / "destination.log").read_text()
    assert "Running on http://127.0.0.1" in log
    assert "Running on" not in ran.stdout + ran.stderr
    assert not answers(port)  # stopped with the run
    assert_left_nothing(ran)


def test_the_lab_picks_the_sandbox_s_port_and_hands_it_in(workdir: Path) -> None:
    # No --destination: `{port}` in the command is the lab's free loopback port, and the URL follows.
    args = ["--handler", "examples.sqs_fifo:keyed", "--destination-command", f"{MOTO} -H 127.0.0.1 -p {{port}}", *SQS]
    ran = run_testbed([*args, "--ops", "10", "-b", "after-effect"], workdir, timeout=300)
    assert ran.code == 0, ran.stderr
    assert [(row["effects"], row["missingOperations"]) for row in ran.json["rows"]] == [(10, 0)]
    url = ran.json["options"]["destination"]["url"]
    host, _, port = url.removeprefix("http://").partition(":")
    assert host == "127.0.0.1" and port.isdigit()
    assert ran.json["options"]["destinationCommand"] == f"{MOTO} -H 127.0.0.1 -p {port}"
    assert not answers(int(port))  # stopped with the run
    assert_left_nothing(ran)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (
            ["--destination", "http://127.0.0.1:{port}"],
            "--destination http://127.0.0.1:{port}: {port} is the lab's port for --destination-command,"
            " and there is none",
        ),
        (
            ["--destination-command", f"{MOTO} -H {{host}} -p {{port}}"],
            "--destination-command '{host}': no placeholder {host}: the lab fills only {port}, a free loopback port",
        ),
    ],
)
def test_a_placeholder_the_lab_cannot_fill_is_refused_in_one_line(workdir: Path, given: list[str], said: str) -> None:
    ran = run_testbed(["--handler", "examples.sqs_fifo:keyed", *given, *SQS], workdir, timeout=60)
    assert ran.code == 2
    assert ran.stderr.strip().splitlines() == [f"testbed: error: {said}"]
    assert ran.results is None
    assert_left_nothing(ran)


def test_a_sandbox_that_exits_at_start_is_named_before_any_cell(workdir: Path, port: int) -> None:
    ran = run_testbed(started_by_the_lab(port, "sh -c 'echo no such region >&2; exit 4'"), workdir, timeout=120)
    assert ran.code == 2, ran.stderr
    lines = ran.stderr.strip().splitlines()
    said = "testbed: error: the destination's sandbox (sh -c 'echo no such region >&2; exit 4') exited (exit 4)"
    assert lines[-1].startswith(said) and lines[-1].endswith("last log line: no such region"), lines
    assert not any(line.startswith("[1/") for line in lines)  # no cell ran
    assert ran.results is None
    assert_left_nothing(ran)


def test_a_command_that_cannot_be_split_is_refused_in_one_line(workdir: Path, port: int) -> None:
    ran = run_testbed(started_by_the_lab(port, f"{MOTO} -p '{port}"), workdir, timeout=60)
    assert ran.code == 2
    assert ran.stderr.strip().splitlines() == [
        f'testbed: error: --destination-command "{MOTO} -p \'{port}": no closing quotation'
    ]
    assert_left_nothing(ran)


def _after_first_cell(port: int, workdir: Path, then: str, command: str | None = None) -> Ran:
    args = [
        *started_by_the_lab(port, command),
        "--ops",
        "5",
        "--every",
        "5",
        "--parallel",
        "1",
        "-b",
        "none",
        "-b",
        "after-effect",
    ]
    proc, _, err = start_testbed(args, workdir)
    seen: set[tuple[int, float]] = set()
    deadline = time.monotonic() + 300
    while "[1/2]" not in err.read_text():
        seen |= descendants(proc.pid)
        assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
        time.sleep(0.05)
    seen |= descendants(proc.pid)
    (server,) = sandboxes(proc.pid)  # the server, below the command the lab started
    if then == "kill the sandbox":
        server.kill()
    else:
        proc.send_signal(signal.SIGINT)
    return finish(proc, workdir, 300, seen=seen)


def test_a_sandbox_that_dies_mid_run_is_named_and_the_cells_before_kept(workdir: Path, port: int) -> None:
    ran = _after_first_cell(port, workdir, "kill the sandbox")
    assert ran.code == 3, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.startswith("testbed: error: ")]
    named = f"testbed: error: the destination's sandbox ({MOTO} -H 127.0.0.1 -p {port}) (pid "
    assert len(lines) == 1 and lines[0].startswith(named) and "died during the run (killed by SIGKILL)" in lines[0]
    assert [row["cell"] for row in ran.json["rows"]] == ["c001"]
    assert_left_nothing(ran)


def test_ctrl_c_stops_the_sandbox_with_the_rest(workdir: Path, port: int) -> None:
    # A shell that starts the server and waits: the lab stops the shell and what it started.
    ran = _after_first_cell(port, workdir, "interrupt", f"sh -c '{MOTO} -H 127.0.0.1 -p {port} & wait'")
    assert ran.code == 130, ran.stderr[-1500:]
    assert not answers(port)
    assert_left_nothing(ran)  # the shell and the server it started, among the rest


PLUGIN_TESTS = """\
import os
import socket
import sys
from pathlib import Path

import httpx


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_lab_starts_the_sandbox_for_the_run_and_stops_it_after(lab):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    moto = Path(sys.executable).with_name("moto_server")
    rows = lab.run(
        "examples.sqs_fifo:keyed",
        boundaries=["after-effect"],
        ops=10,
        destination=url,
        destination_command=f"{moto} -H 127.0.0.1 -p {port}",
        evidence="examples.sqs_fifo:effects",
        destination_effects=["X-Amz-Target: AmazonSQS.SendMessage"],
    )
    rows.assert_exactly_once()
    assert rows.row("after-effect").counts.effects == 10
    try:
        httpx.get(url, timeout=1)
    except httpx.HTTPError:
        return
    raise AssertionError("the sandbox still answers after the run")
"""


def test_the_plugin_starts_the_sandbox_for_a_run(tmp_path: Path) -> None:
    """`lab.run(..., destination_command=...)` in a user's own pytest run."""
    from tests.e2e.test_plugin import ROOT, _plugin_args

    (tmp_path / "test_sandboxed.py").write_text(PLUGIN_TESTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("RQ_KEY_PREFIX", None)  # this session's: the user's run claims its own
    argv = [sys.executable, "-m", "pytest", *_plugin_args(), "-p", "no:cacheprovider", "-q", "test_sandboxed.py"]
    ran = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 passed" in ran.stdout


def test_ctrl_c_while_the_lab_waits_for_the_sandbox_stops_it(workdir: Path, port: int) -> None:
    proc, _, err = start_testbed(started_by_the_lab(port, "sleep 600"), workdir)
    seen: set[tuple[int, float]] = set()
    deadline = time.monotonic() + 120
    # Until the sandbox and the workers (the zygote and four forked from it) are up: the lab then
    # waits for the workers to register, and for the sandbox to answer, which it never does.
    while not (
        any(below(proc.pid, lambda argv: argv == ["sleep", "600"]))
        and len(list(below(proc.pid, lambda argv: argv[1:3] == ["-m", "workers.zygote"]))) >= 5
    ):
        assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
        time.sleep(0.05)
    seen |= descendants(proc.pid)  # the lab is waiting for it to answer: no cell has started
    proc.send_signal(signal.SIGINT)
    ran = finish(proc, workdir, 120, seen=seen)
    assert ran.code == 130, ran.stderr[-1500:]
    assert not any(line.startswith("[1/") for line in ran.stderr.splitlines())
    assert_left_nothing(ran)
