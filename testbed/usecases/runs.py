"""A run of cells on the stack, as `testbed chaos`, `replay` and `load` and the plugin's
`lab.run` ask for it (`RunRequest`), and what the lab runs for it (`PreparedRun`).

A front end builds the request from its own input, then `prepare` checks the users' jobs,
puts the cells on the engine asked for and settles the run's options. Nothing here starts
a process but the handlers' import check."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from labcore import plan as plans
from labcore.destination import mail_refused
from labcore.faults import RULES, Fault
from labcore.procs import free_port
from testbed.engines import engine_of
from testbed.engines.base import EngineChoice, RunShape
from testbed.errors import UsageError
from testbed.experiment.matrix import Cell
from testbed.infra.sandbox import FLAG as COMMAND_FLAG
from testbed.infra.sandbox import placement, with_port
from testbed.infra.stack import StackOptions
from testbed.judge.promises import Promise
from testbed.lab import userjobs
from testbed.lab.destination import EVIDENCE_TIMEOUT, DestinationChoice, Reader
from testbed.lab.options import RunOptions
from testbed.nemesis.recovery import Recovery
from testbed.usecases.engines import on_engine

# A cell's own time, before the ops' share and any recovery the run waits for.
BASE_CELL_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class Jobs:
    """The users' jobs a run calls (`module:function`), where they import from, what they
    are judged against, and what is set in their work-horses' environment."""

    handlers: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    promise: str = Promise.EXACTLY_ONCE
    env: Mapping[str, str] = field(default_factory=dict)
    import_timeout: float = userjobs.IMPORT_TIMEOUT
    destination: DestinationChoice | None = None  # a real destination they talk to, through the lab

    def prepare(self, engine: EngineChoice) -> tuple[str, ...]:
        """Each handler checked in a process of its own, as the engine runs it (a UsageError says
        why not); the paths, absolute."""
        env, name, app = dict(self.env), engine_of(engine).name, engine.app or engine.workflow
        timeout = self.import_timeout
        return userjobs.prepare(self.handlers, self.paths, self.promise, env, timeout, name, app, engine.plugins)

    def reader(self, paths: Sequence[str]) -> Reader | None:
        """The destination's evidence reader, the destination checked and answering (else exit 2),
        the reader imported as the handlers are; None without a destination."""
        if self.destination is None:
            return None
        destination = self.destination.check(self.handlers)
        self.destination.check_reachable()
        assert self.destination.evidence is not None  # checked
        userjobs.check([self.destination.evidence], paths, dict(self.env), self.import_timeout)
        return self.destination.reader(destination, paths)

    def with_sandbox(self, stack: StackOptions) -> StackOptions:
        """The stack, with the destination's sandbox among its parts if the lab starts it, and
        its provider relaying SMTP if the destination is an smtp:// one."""
        if self.destination is not None and self.destination.is_mail:
            if stack.remote is not None:
                raise UsageError("an smtp:// --destination with --hosts: the lab relays mail from this host only")
            stack = replace(stack, mail_relay=True)
        sandbox = None if self.destination is None else self.destination.sandbox()
        if sandbox is None:
            return stack
        if stack.remote is not None:
            raise UsageError(
                f"{COMMAND_FLAG} with --hosts: the provider on another host could not reach a sandbox started here;"
                " start it where the provider can reach it and pass --destination alone"
            )
        return replace(stack, sandbox=sandbox)


def destination_choice(
    url: str | None,
    evidence: str | None,
    effects: Sequence[str] = (),
    evidence_timeout: float = EVIDENCE_TIMEOUT,
    command: str | None = None,
) -> DestinationChoice | None:
    """A real destination as a front end gives it (None: none); its reader, rules and sandbox go with a URL.
    A command with `{port}` is handed a free loopback port the lab picks here, and the URL
    (`{port}` in it, or by default http://127.0.0.1:{port}) is where it answers."""
    url, takes_port = placement(url, command)
    port = free_port() if takes_port else None
    if url is None:
        if evidence is not None or effects or command is not None:
            raise UsageError(
                f"--evidence, --destination-effect and {COMMAND_FLAG} go with --destination URL"
                " (or a command that takes the lab's {port})"
            )
        return None
    url = url if port is None else with_port(url, port)
    return DestinationChoice(url, evidence, tuple(effects), evidence_timeout, command, port)


@dataclass(frozen=True, slots=True)
class RunRequest:
    """Cells to run, their faults' plan, and the run's settings, as a front end asks for them.
    `cell_timeout` None: long enough for the slowest honest cell (`cell_timeout`)."""

    cells: Sequence[Cell]
    plan: Callable[[Cell], plans.Plan]
    ops: int
    jobs: Jobs = Jobs()
    engine: EngineChoice = field(default_factory=EngineChoice)
    retries: int = 1
    seed: int = 0
    client_timeout: float = 0.5
    cell_timeout: float | None = None
    parallel: int = 2
    window: int | None = None
    history: bool = True
    promises: bool = False
    overrides: Mapping[Cell, dict[str, int]] = field(default_factory=dict)
    recovery: Recovery = Recovery.FORCED
    cell_prefix: str = "c"

    def prepare(self, stack: StackOptions) -> PreparedRun:
        """The jobs checked, the cells on the engine, the stack fitted to their faults."""
        mail = self.jobs.destination is not None and self.jobs.destination.is_mail
        if mail and (refused := mail_refused(c.boundary for c in self.cells)):
            raise UsageError(refused)
        paths = self.jobs.prepare(self.engine)
        reader = self.jobs.reader(paths)
        shape = RunShape(self.retries, self.jobs.handlers, paths, forced_recovery=self.recovery is Recovery.FORCED)
        stack, cells = on_engine(self.engine, self.jobs.with_sandbox(stack), self.cells, shape)
        if self.overrides and stack.engine.name != "rq":
            s = self.engine.spelling
            raise UsageError(
                f"{s.expect} names cells of RQ's table: not with {s.engine} {stack.engine.name} (one table per setting)"
            )
        options = RunOptions(
            cells=cells,
            plan=self.plan,
            ops=self.ops,
            retries=self.retries,
            seed=self.seed,
            client_timeout=self.client_timeout,
            recovery=self.recovery,
            cell_timeout=cell_timeout(self.cell_timeout, self.ops, cells, self.recovery, stack),
            parallel=self.parallel,
            window=self.window,
            history=self.history,
            promises=self.promises,
            overrides=dict(self.overrides),
            promise=self.jobs.promise,
            paths=paths,
            env=dict(self.jobs.env),
            cell_prefix=self.cell_prefix,
            reader=reader,
        )
        return PreparedRun(stack, options)


@dataclass(frozen=True, slots=True)
class PreparedRun:
    """What the lab runs: the stack the cells need and the run's options."""

    stack: StackOptions
    options: RunOptions


def cell_timeout(
    given: float | None, ops: int, cells: Sequence[Cell], recovery: Recovery, stack: StackOptions
) -> float:
    """Long enough for the slowest honest cell: a few jobs a second, plus the wait for a killed
    worker's jobs to come back where the engine says they come back late (RQ's own maintenance,
    Celery's broker's visibility timeout)."""
    if given is not None:
        return given
    timeout = BASE_CELL_TIMEOUT + ops * 0.05
    if any(Fault.KILL_WORKER in c.faults for c in cells):
        timeout += stack.engine.kill_worker_wait(recovery is Recovery.RQ, stack.settings)
    return timeout


def fit_stack(stack: StackOptions, cells: Iterable[Cell]) -> StackOptions:
    return fit_faults(stack, frozenset().union(*(c.faults for c in cells)))


def fit_faults(stack: StackOptions, faults: Iterable[Fault]) -> StackOptions:
    """What the stack cannot do with these faults is refused before anything starts:
    crashing a provider the run did not start, or cutting off a machine that no host daemon
    of the run is on. A run that cuts hosts off asks its host daemons whether they can."""
    faults = frozenset(faults)
    if stack.remote is None:
        cutting = sorted(f.value for f in faults if RULES[f].cuts_network)
        if cutting:
            raise UsageError(
                f"{cutting[0]} cuts a worker's host off from the provider: it needs the worker hosts"
                " (--hosts, each host daemon with CAP_NET_ADMIN)"
            )
        return stack
    crashing = sorted(f.value for f in faults if RULES[f].kills_provider)
    if crashing:
        raise UsageError(f"{crashing[0]} needs a provider this run starts; with --hosts it cannot be crashed")
    return replace(stack, remote=replace(stack.remote, partition=any(RULES[f].cuts_network for f in faults)))
