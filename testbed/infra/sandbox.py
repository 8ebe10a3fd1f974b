"""The user's destination sandbox as a part of the stack (`--destination-command`): started
with the run, waited for until `--destination` answers, watched like Redis and the
provider, and stopped with everything it started at the end, whatever ends the run.

Its output goes to `destination.log` in the run's temp dir, kept with the run's logs:
never to the terminal. A sandbox that exits or never answers before the first cell is
a run that cannot start (SetupError, exit 2); one that dies mid-run is named as a dead
part is (PartDied, exit 3).
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from labcore.procs import guarded, spawn, stop_all, stop_session
from testbed.errors import SetupError, UsageError
from testbed.infra.liveness import check_alive, last_line

ANSWER_WITHIN = 5.0  # seconds a destination has to answer one of the lab's checks
READY_WITHIN = 60.0  # seconds a sandbox has to answer at its URL (moto's server starts in about 2)
LOG = "destination.log"
FLAG = "--destination-command"


@dataclass(frozen=True, slots=True)
class SandboxCommand:
    """The command that starts a destination's sandbox, and the URL it answers at once started."""

    argv: tuple[str, ...]
    url: str

    @property
    def spelled(self) -> str:
        """As a shell would take it back."""
        return shlex.join(self.argv)


def parse_command(text: str, url: str) -> SandboxCommand:
    """A sandbox's command line, split as a POSIX shell would (no shell runs it): UsageError,
    one line, for a quote left open, an empty command or a program not found."""
    try:
        argv = tuple(shlex.split(text))
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise UsageError(f"{FLAG} {text!r}: {str(exc).lower()}") from None
    if not argv:
        raise UsageError(f"{FLAG} is empty: give the command that starts your sandbox")
    if shutil.which(argv[0]) is None:
        raise UsageError(f"{FLAG} {text!r}: no program {argv[0]!r} found (on PATH, or as a path)")
    return SandboxCommand(argv, url)


def answers(url: str, within: float = ANSWER_WITHIN) -> str | None:
    """None if the destination answers an HTTP request at its URL (any answer will do: a
    sandbox's root may well be a 404); otherwise why not."""
    import httpx  # not for a command line's start

    try:
        with httpx.Client(timeout=within) as client:
            client.get(url)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return None


class Sandbox:
    """One started sandbox: `launch`, `wait_ready`, `check` while the run goes, `stop`."""

    def __init__(self, command: SandboxCommand, workdir: Path) -> None:
        self.command = command
        self.log = workdir / LOG
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return f"the destination's sandbox ({self.command.spelled})"

    def launch(self) -> None:
        # Its own session (a Ctrl-C reaches only the lab, which stops it in order), and killed
        # by the kernel if the lab dies without cleaning up.
        self._proc = spawn(guarded(self.command.argv), self.log)

    def wait_ready(self, timeout: float = READY_WITHIN) -> None:
        """Until the destination answers at its URL; SetupError naming the command if it exits first
        or does not answer within `timeout`."""
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        url = self.command.url
        while True:
            if (code := self._proc.poll()) is not None:
                raise SetupError(
                    f"{self.name} exited (exit {code}) before --destination {url} answered;"
                    f" last log line: {last_line(self.log)}"
                )
            why = answers(url, within=1.0)
            if why is None:
                return
            if time.monotonic() > deadline:
                raise SetupError(f"{self.name} did not answer at --destination {url} within {timeout:.0f} s ({why})")
            time.sleep(0.05)

    def check(self) -> None:
        check_alive(self.name, self._proc, self.log)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def stop(self) -> None:
        """It and every process it started: those below it, then what is left in its session."""
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        stop_all([proc])
        stop_session(proc.pid)


@contextlib.contextmanager
def running(command: SandboxCommand, workdir: Path) -> Iterator[Sandbox]:
    """A sandbox started and answering; stopped, with all it started, on leaving."""
    sandbox = Sandbox(command, workdir)
    try:
        sandbox.launch()
        sandbox.wait_ready()
        yield sandbox
    finally:
        sandbox.stop()
