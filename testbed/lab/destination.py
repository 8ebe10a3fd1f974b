"""A real destination behind the lab, on the lab's side: checked up front, and its records
read after each cell by the user's evidence reader, in a process of its own.

The destination must answer before the run starts anything (any HTTP answer will do:
a sandbox's root may well be a 404); one that stops answering, and a reader that fails,
hangs or answers something that is not evidence, end the run as a failure of the lab.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from labcore.destination import BadDestination, Destination, Effects, parse_url
from testbed.errors import RunFailure, SetupError, UsageError
from testbed.infra.sandbox import FLAG, SandboxCommand, answers, parse_command
from testbed.judge.evidence import BadEvidence, Evidence, parse_answer
from testbed.lab.userjobs import bounded
from workers.specs import TargetError, split

EVIDENCE_TIMEOUT = 60.0  # seconds a reader may take over one cell's ops (--evidence-timeout)
_MAX_EVIDENCE_TIMEOUT = 3600.0
_ANSWER_BYTES = 64 << 20  # of the reader's output read back: its answer is its last line


def check_answers(url: str) -> None:
    """Before any work: a destination that does not answer is refused (exit 2)."""
    why = answers(url)
    if why is not None:
        raise SetupError(f"--destination {url} does not answer ({why})")


def check_silent(url: str) -> None:
    """Before any work, for a sandbox the lab starts: nothing answers at its URL yet (else the
    run would be judged against whatever answers there, and the sandbox fail to bind)."""
    if answers(url) is None:
        raise SetupError(f"--destination {url} answers before {FLAG} started: something else listens there")


class DestinationGone(RunFailure):
    """The destination stopped answering the lab's own check before a cell's evidence was read."""


@dataclass(frozen=True, slots=True)
class Reader:
    """The user's evidence reader (`module:function`) over a destination, run in a process of its own."""

    spec: str
    destination: Destination
    paths: Sequence[str] = ()
    timeout: float = EVIDENCE_TIMEOUT

    def read(self, op_ids: list[str]) -> Evidence:
        """What the destination holds for these ops; RunFailure naming the reader if it
        cannot be had, or the destination if it no longer answers."""
        url = self.destination.url
        why = answers(url)
        if why is not None:
            raise DestinationGone(f"the destination {url} stopped answering ({why})")
        argv = [sys.executable, "-m", "workers.evidence", self.spec, url]
        for path in self.paths:
            argv += ["--path", path]
        code, stdout, stderr = bounded(argv, os.environ, self.timeout, json.dumps(op_ids).encode(), _ANSWER_BYTES)
        named = f"the evidence reader {self.spec}"
        if code is None:
            raise RunFailure(f"{named} took longer than {self.timeout:g} s")
        if code != 0:
            lines = stderr.strip().splitlines()
            raise RunFailure(f"{named} failed: {lines[-1] if lines else f'exit {code}'}")
        last = (stdout.strip().splitlines() or [""])[-1]
        try:
            return parse_answer(last, op_ids)
        except BadEvidence as exc:
            raise RunFailure(f"{named} answered no evidence: {exc}") from None


@dataclass(frozen=True, slots=True)
class DestinationChoice:
    """A destination as a front end gives it: its URL, the evidence reader, the effect rules."""

    url: str
    evidence: str | None = None  # module:function
    effects: tuple[str, ...] = ()
    evidence_timeout: float = EVIDENCE_TIMEOUT
    command: str | None = None  # --destination-command: the sandbox the lab starts, as a shell would split it
    port: int | None = None  # the loopback port the lab picked for the command's `{port}` (in `url` already)

    @property
    def is_mail(self) -> bool:
        return Destination(self.url).is_mail

    def check(self, handlers: Sequence[str]) -> Destination:
        """The destination, its input checked (a UsageError says what is wrong), before any work."""
        if not handlers:
            raise UsageError("--destination needs --handler: it is your own job that talks to the destination")
        if self.evidence is None:
            raise UsageError("--destination needs --evidence MODULE:FUNCTION: the destination's records are the judge")
        try:
            split(self.evidence)
            destination = Destination(parse_url(self.url), Effects.parse(self.effects))
        except (BadDestination, TargetError) as exc:
            raise UsageError(str(exc)) from None
        if destination.is_mail and self.effects:
            raise UsageError("--destination-effect is for HTTP: at an smtp:// destination every message is an effect")
        if not 0 < self.evidence_timeout <= _MAX_EVIDENCE_TIMEOUT:  # also NaN
            raise UsageError(f"--evidence-timeout must be a number of seconds in (0, {_MAX_EVIDENCE_TIMEOUT:.0f}]")
        self.sandbox()
        return destination

    def sandbox(self) -> SandboxCommand | None:
        """The sandbox the lab starts (None: the user started the destination); UsageError for a bad command."""
        return None if self.command is None else parse_command(self.command, self.url, self.port)

    def check_reachable(self) -> None:
        """Before any work: the destination answers, or, for a sandbox the lab starts, nothing answers there yet."""
        if self.command is None:
            check_answers(self.url)
        else:
            check_silent(self.url)

    def reader(self, destination: Destination, paths: Sequence[str]) -> Reader:
        assert self.evidence is not None  # checked
        return Reader(self.evidence, destination, tuple(paths), self.evidence_timeout)
