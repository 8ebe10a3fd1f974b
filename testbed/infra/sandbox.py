"""The user's destination sandbox as a part of the stack (`--destination-command`): started
with the run, waited for until `--destination` answers, watched like Redis and the
provider, and stopped with everything it started at the end, whatever ends the run.

`{port}` in the command (and in `--destination`, which then defaults to
`http://127.0.0.1:{port}`) leaves the port to the lab: it picks a free loopback port and
puts it in each argument after the command is split, never through a shell.

Its output goes to `destination.log` in the run's temp dir, kept with the run's logs:
never to the terminal. A sandbox that exits or never answers before the first cell is
a run that cannot start (SetupError, exit 2); one that dies mid-run is named as a dead
part is (PartDied, exit 3).
"""

from __future__ import annotations

import contextlib
import re
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from labcore.destination import MAIL_SCHEME, Destination
from testbed.errors import UsageError
from testbed.infra.started import StartedPart

ANSWER_WITHIN = 5.0  # seconds a destination has to answer one of the lab's checks
READY_WITHIN = 60.0  # seconds a sandbox has to answer at its URL (moto's server starts in about 2)
LOG = "destination.log"
FLAG = "--destination-command"
PORT = "port"  # the one placeholder: `{port}`, the loopback port the lab picked
LOOPBACK = "http://127.0.0.1:{port}"  # --destination, when the command takes the lab's port and no URL is given
# `{name}` alone: the braces of a JSON argument such as '{"a": 1}' or '{}' are no placeholder.
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True, slots=True)
class SandboxCommand:
    """The command that starts a destination's sandbox, and the URL it answers at once started."""

    argv: tuple[str, ...]
    url: str

    @property
    def spelled(self) -> str:
        """As a shell would take it back."""
        return shlex.join(self.argv)


def placeholders(text: str) -> list[str]:
    """The names of the `{name}` placeholders in an argument or a URL, in order."""
    return _PLACEHOLDER.findall(text)


def unknown_placeholder(flag: str, text: str) -> str | None:
    """Why a placeholder in `text` is none the lab fills (None: all are `{port}`)."""
    unknown = [name for name in placeholders(text) if name != PORT]
    if not unknown:
        return None
    return f"{flag} {text!r}: no placeholder {{{unknown[0]}}}: the lab fills only {{{PORT}}}, a free loopback port"


def split_command(text: str) -> tuple[str, ...]:
    """A sandbox's command line, split as a POSIX shell would (no shell runs it): UsageError,
    one line, for a quote left open, an empty command, a program not found or a placeholder
    the lab does not fill."""
    try:
        argv = tuple(shlex.split(text))
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise UsageError(f"{FLAG} {text!r}: {str(exc).lower()}") from None
    if not argv:
        raise UsageError(f"{FLAG} is empty: give the command that starts your sandbox")
    if shutil.which(argv[0]) is None:
        raise UsageError(f"{FLAG} {text!r}: no program {argv[0]!r} found (on PATH, or as a path)")
    for arg in argv:
        if (why := unknown_placeholder(FLAG, arg)) is not None:
            raise UsageError(why)
    return argv


def placement(url: str | None, command: str | None) -> tuple[str | None, bool]:
    """The destination's URL, as given or by default (`{port}` still in it), and whether the
    lab picks the port: it does when the command has `{port}` in an argument. UsageError,
    one line, for a placeholder the lab does not fill, a URL that names its own port when
    the command takes the lab's, or `{port}` in a URL with no command to hand it to."""
    argv = () if command is None else split_command(command)
    takes = any(PORT in placeholders(arg) for arg in argv)
    if url is None:
        return (LOOPBACK if takes else None), takes
    if (why := unknown_placeholder("--destination", url)) is not None:
        raise UsageError(why)
    given = PORT in placeholders(url)
    if takes and not given:
        raise UsageError(
            f"--destination {url}: {FLAG} takes the lab's {{{PORT}}}, so the URL must too ({LOOPBACK}) or be left out"
        )
    if given and command is None:
        raise UsageError(f"--destination {url}: {{{PORT}}} is the lab's port for {FLAG}, and there is none")
    if given and not takes:
        raise UsageError(f"--destination {url}: {FLAG} has no {{{PORT}}}, so the lab picks no port to put there")
    return url, takes


def with_port(text: str, port: int) -> str:
    """`{port}` in an argument or a URL, filled."""
    return text.replace(f"{{{PORT}}}", str(port))


def parse_command(text: str, url: str, port: int | None = None) -> SandboxCommand:
    """The sandbox's command, split (`split_command`), `{port}` in each argument filled with
    the lab's `port`."""
    argv = split_command(text)
    if port is not None:
        argv = tuple(with_port(arg, port) for arg in argv)
    return SandboxCommand(argv, url)


def answers(url: str, within: float = ANSWER_WITHIN) -> str | None:
    """None if the destination answers an HTTP request at its URL (any answer will do: a
    sandbox's root may well be a 404), or, at an `smtp://` URL, greets with 220; otherwise
    why not."""
    if url.startswith(f"{MAIL_SCHEME}://"):
        return _greets(url, within)
    import httpx  # not for a command line's start

    try:
        with httpx.Client(timeout=within) as client:
            client.get(url)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return None


def _greets(url: str, within: float) -> str | None:
    import smtplib

    _, host, port = Destination(url).origin
    try:
        # The name it greets with is the lab's: no look-up of this machine's name (smtplib's default).
        with smtplib.SMTP(host, port, local_hostname="testbed.invalid", timeout=within) as client:
            client.noop()
    except (OSError, smtplib.SMTPException) as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return None


def sandbox_part(command: SandboxCommand, workdir: Path) -> StartedPart:
    """One sandbox, to `launch`, `wait_ready` until the destination answers at its URL, `check`
    while the run goes and `stop`."""
    url = command.url
    return StartedPart(
        f"the destination's sandbox ({command.spelled})",
        command.argv,
        workdir / LOG,
        lambda: answers(url, within=1.0),
        f"answer at --destination {url}",
        READY_WITHIN,
    )


@contextlib.contextmanager
def running(command: SandboxCommand, workdir: Path) -> Iterator[StartedPart]:
    """A sandbox started and answering; stopped, with all it started, on leaving."""
    sandbox = sandbox_part(command, workdir)
    try:
        sandbox.launch()
        sandbox.wait_ready()
        yield sandbox
    finally:
        sandbox.stop()
