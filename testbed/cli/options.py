"""Options more than one command takes, declared once.

The stack options (workers, Redis, provider port, RQ's recovery knobs, keep)
are added to a command by `@stack_options`: the command receives them as one
`StackArgs` (`stack_args`) and never lists them itself.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_type_hints

from typer import Option

from labcore.boundaries import ORDER
from labcore.delivery import askable
from labcore.faults import Fault
from testbed.experiment.scenarios import SCENARIOS
from testbed.infra.stack import PRIVATE_FLAG
from testbed.lab.destination import EVIDENCE_TIMEOUT
from testbed.lab.userjobs import IMPORT_TIMEOUT
from workers.strategies import STRATEGIES

if TYPE_CHECKING:
    from testbed.engines.base import EngineChoice
    from testbed.lab.destination import DestinationChoice
    from testbed.usecases.runs import Jobs

STRATEGY_NAMES = ", ".join(STRATEGIES)
BOUNDARY_NAMES = ", ".join(b.value for b in ORDER)
FAULT_NAMES = ", ".join(f.value for f in Fault)
SCENARIO_NAMES = ", ".join(SCENARIOS)

Strategies = Annotated[
    list[str] | None,
    Option("--strategy", "-s", metavar="STRATEGY", help=f"Strategy (repeatable): {STRATEGY_NAMES}."),
]
Boundaries = Annotated[
    list[str] | None,
    Option("--boundary", "-b", metavar="BOUNDARY", help=f"Boundary (repeatable): none, {BOUNDARY_NAMES}."),
]
Retries = Annotated[int, Option("--retries", metavar="N", help="RQ Retry(max=N) per job (0 to 10).")]
Seed = Annotated[int, Option("--seed", metavar="N", help="Seed for payloads and random plans.")]
Expect = Annotated[
    list[str] | None,
    Option(
        "--expect",
        metavar="CELL=E/M",
        help="Your own expectation for one cell, replacing the model's (repeatable):"
        " STRATEGY@BOUNDARY[:FAULT[:SCENARIO]]=EFFECTS/MISSING.",
    ),
]
Yes = Annotated[bool, Option("--yes", "-y", help="Run even past the limits (30 min or 2 GB of Redis, estimated).")]
ClientTimeout = Annotated[
    float,
    Option(
        "--client-timeout",
        metavar="SECONDS",
        help="Seconds before an armed provider call times out (the timeout and late faults); other calls wait.",
    ),
]
CellTimeout = Annotated[
    float | None,
    Option("--cell-timeout", metavar="SECONDS", help="Give up on a cell after this long (default: from the run)."),
]
Paths = Annotated[
    list[Path] | None,
    Option("--path", metavar="DIR", help="Put DIR on the import path of --handler (repeatable; . is on it)."),
]
ImportTimeout = Annotated[
    float,
    Option(
        "--import-timeout",
        metavar="SECONDS",
        help="How long importing --handler may take before the run starts (exit 2 past it).",
    ),
]
PromiseOption = Annotated[
    str,
    Option(
        "--promise",
        metavar="PROMISE",
        help="What --handler is judged against: exactly-once, at-least-once, at-most-once.",
    ),
]
PRIVATE_HELP = "--redis-url is yours alone: use it although it takes clients without a password."
ResultsPath = Annotated[Path, Option("--json", metavar="PATH", help="Where to write the results (a file).")]


@dataclass(frozen=True, slots=True)
class StackArgs:
    """The stack a run stands on, as the command line gives it."""

    workers: Annotated[int, Option("--workers", metavar="N", help="RQ worker processes.")] = 4
    redis_url: Annotated[
        str | None,
        Option(
            "--redis-url", metavar="URL", envvar="REDIS_URL", help="Use this Redis (the run keeps to its own prefix)."
        ),
    ] = None
    redis_private: Annotated[
        bool,
        Option(PRIVATE_FLAG, help=PRIVATE_HELP),
    ] = False
    provider_port: Annotated[
        int, Option("--provider-port", metavar="PORT", help="Provider port (default: a free one).")
    ] = 0
    recovery: Annotated[
        str, Option("--recovery", metavar="MODE", help="How a killed worker's job comes back: forced or rq.")
    ] = "forced"
    worker_ttl: Annotated[int, Option("--worker-ttl", metavar="SECONDS", help="rq worker --worker-ttl.")] = 420
    maintenance_interval: Annotated[
        int, Option("--maintenance-interval", metavar="SECONDS", help="rq worker --maintenance-interval.")
    ] = 600
    job_monitoring_interval: Annotated[
        int, Option("--job-monitoring-interval", metavar="SECONDS", help="rq worker --job-monitoring-interval.")
    ] = 30
    keep: Annotated[bool, Option("--keep", help="Keep the temp dir (and the keys on a shared Redis).")] = False
    engine: Annotated[
        str,
        Option(
            "--engine",
            metavar="ENGINE",
            help="The queue the jobs run on: rq, celery (testbed[celery]) or temporal (testbed[temporal]).",
        ),
    ] = "rq"
    delivery: Annotated[
        list[str] | None,
        Option(
            "--delivery",
            metavar="SETTING",
            help=f"Celery delivery or Temporal recovery setting (repeatable; default: all): {', '.join(askable())}.",
        ),
    ] = None
    app: Annotated[
        str | None,
        Option(
            "--celery-app",
            metavar="MODULE:APP",
            help="Run --handler, a task of your Celery app, with its own options (implies --engine celery).",
        ),
    ] = None
    workflow: Annotated[
        str | None,
        Option(
            "--temporal-workflow",
            metavar="MODULE:WORKFLOW",
            help="Your Temporal workflow, --handler its activity, under its own policy (implies --engine temporal).",
        ),
    ] = None
    plugins: Annotated[
        list[str] | None,
        Option(
            "--temporal-plugin",
            metavar="MODULE:PLUGIN",
            help="With --temporal-workflow: a Temporal plugin for its client and worker, as yours (repeatable).",
        ),
    ] = None
    visibility_timeout: Annotated[
        int | None,
        Option(
            "--visibility-timeout",
            metavar="SECONDS",
            help="Celery: when the broker restores a killed worker's unacknowledged task (default: the app's, 3600).",
        ),
    ] = None
    start_to_close_timeout: Annotated[
        float | None,
        Option(
            "--start-to-close-timeout",
            metavar="SECONDS",
            help="Temporal: the activity's start_to_close_timeout, when a killed attempt is retried (default 5).",
        ),
    ] = None
    heartbeat_timeout: Annotated[
        float | None,
        Option(
            "--heartbeat-timeout",
            metavar="SECONDS",
            help="Temporal: the activity's heartbeat_timeout under --delivery heartbeat (default 1).",
        ),
    ] = None
    # A stack the run does not start (testbed.cli.hosts): the hosts' workers and a provider on the network.
    hosts: Annotated[
        bool, Option("--hosts", help="Use the workers of the hosts registered with --redis-url (testbed host).")
    ] = False
    provider_url: Annotated[
        str | None,
        Option(
            "--provider-url", metavar="URL", envvar="TESTBED_PROVIDER_URL", help="Use this provider (with --hosts)."
        ),
    ] = None
    provider_token_file: Annotated[
        Path | None,
        Option(
            "--provider-token-file",
            metavar="PATH",
            help="File holding the provider's token (else $TESTBED_PROVIDER_TOKEN).",
        ),
    ] = None

    def engine_choice(self) -> EngineChoice:
        from testbed.engines.base import EngineChoice

        return EngineChoice(
            self.engine,
            tuple(self.delivery or ()),
            self.app,
            self.visibility_timeout,
            self.start_to_close_timeout,
            self.heartbeat_timeout,
            self.workflow,
            tuple(self.plugins or ()),
        )


@dataclass(frozen=True, slots=True)
class StoreArgs:
    """Where a run is kept, and what else it writes."""

    store: Annotated[
        Path, Option("--store", metavar="DIR", help="Keep the run under DIR/<run-id>/ (and DIR/latest).")
    ] = Path("runs")
    no_store: Annotated[bool, Option("--no-store", help="Keep nothing but --json.")] = False
    junit: Annotated[
        Path | None, Option("--junit", metavar="PATH", help="Also write JUnit XML here (one test case per cell).")
    ] = None
    report: Annotated[bool, Option("--report", help="Write report.html in the stored run and print its path.")] = False


@dataclass(frozen=True, slots=True)
class JobArgs:
    """Users' own jobs, as the command line gives them (chaos, load and explore: replay runs one)."""

    handler: Annotated[
        list[str] | None,
        Option(
            "--handler",
            metavar="MODULE:FUNCTION",
            help="Your own job, called as function(op_id, payload) with TESTBED_PROVIDER_URL set (repeatable).",
        ),
    ] = None
    path: Paths = None
    promise: PromiseOption = "exactly-once"
    import_timeout: ImportTimeout = IMPORT_TIMEOUT

    @property
    def handlers(self) -> list[str]:
        return self.handler or []

    def jobs(self, handlers: Sequence[str] | None = None, destination: DestinationArgs | None = None) -> Jobs:
        """The jobs a run calls: these handlers (default: --handler), their paths and promise,
        and the real destination they talk to, if any."""
        from testbed.usecases.runs import Jobs

        chosen = self.handlers if handlers is None else handlers
        paths = tuple(str(p) for p in self.path or [])
        choice = None if destination is None else destination.choice()
        return Jobs(tuple(chosen), paths, self.promise, import_timeout=self.import_timeout, destination=choice)


@dataclass(frozen=True, slots=True)
class DestinationArgs:
    """A real destination your own jobs talk to, through the lab, judged from its own records."""

    destination: Annotated[
        str | None,
        Option(
            "--destination",
            metavar="URL",
            help="Your jobs' real destination (a sandbox): they reach it through the lab at"
            " $TESTBED_DESTINATION_URL, and --evidence reads its records ({port}: the lab's, for"
            " --destination-command; default then http://127.0.0.1:{port}).",
        ),
    ] = None
    evidence: Annotated[
        str | None,
        Option(
            "--evidence",
            metavar="MODULE:FUNCTION",
            help="Called as function(destination_url, op_ids) after each cell: {op_id: [record ids]}, the effects.",
        ),
    ] = None
    destination_effect: Annotated[
        list[str] | None,
        Option(
            "--destination-effect",
            metavar="RULE",
            help="Which requests are effects (repeatable): 'POST [/path*]', 'Header: value' or field=value"
            " (default: POST, PUT, PATCH, DELETE).",
        ),
    ] = None
    evidence_timeout: Annotated[
        float, Option("--evidence-timeout", metavar="SECONDS", help="How long --evidence may take per cell.")
    ] = EVIDENCE_TIMEOUT
    destination_command: Annotated[
        str | None,
        Option(
            "--destination-command",
            metavar="'CMD ...'",
            help="Start the sandbox with the run (split as a shell would), wait until --destination answers,"
            " stop it and all it started at the end; its output goes to the run's logs. {port} in it:"
            " a free loopback port the lab picks.",
        ),
    ] = None

    def choice(self) -> DestinationChoice | None:
        from testbed.usecases.runs import destination_choice

        return destination_choice(
            self.destination,
            self.evidence,
            tuple(self.destination_effect or ()),
            self.evidence_timeout,
            self.destination_command,
        )


def _group(cls: type) -> tuple[type, list[inspect.Parameter]]:
    hints = get_type_hints(cls, include_extras=True)
    kind = inspect.Parameter.KEYWORD_ONLY
    return cls, [inspect.Parameter(f.name, kind, default=f.default, annotation=hints[f.name]) for f in fields(cls)]


_GROUPS = {
    "stack_args": _group(StackArgs),
    "store_args": _group(StoreArgs),
    "job_args": _group(JobArgs),
    "destination_args": _group(DestinationArgs),
}


def run_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command the options every run takes: it receives them grouped, as
    `stack_args: StackArgs` and `store_args: StoreArgs` (and, if it asks for `job_args:
    JobArgs`, users' jobs), and never lists them."""
    signature = inspect.signature(command, eval_str=True).parameters
    groups = {name: group for name, group in _GROUPS.items() if name in signature}
    own = [p for p in signature.values() if p.name not in groups]

    @functools.wraps(command)
    def with_groups(**given: Any) -> Any:
        grouped = {name: cls(**{p.name: given.pop(p.name) for p in params}) for name, (cls, params) in groups.items()}
        return command(**grouped, **given)

    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
    params += [p for _, group in groups.values() for p in group]
    # typer reads the signature and the annotations: both show the command's own options, then the groups'.
    with_groups.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    with_groups.__annotations__ = {p.name: p.annotation for p in params}
    return with_groups
