"""results.json: what a run says of itself and of each of its cells, as
`--json` writes it and the run store keeps it. Written and parsed here only.

A run writes it once, at its end (`document`, `write`), from its rows
(`testbed.judge.scorecard.Row`) and what its session says of the run; the
stored-run commands, the recheck and the reports read it back as `Results`
(`read`), checked against these records. `results_schema()` is its JSON
Schema, as the docs publish it (docs/reference/results.schema.json).

Runs stored before a field was added still read: such fields have defaults.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, model_validator
from pydantic.functional_validators import ModelWrapValidatorHandler

from labcore.boundaries import parse_boundary
from labcore.delivery import known
from labcore.faults import Fault
from labcore.schedule import Schedule, ScheduleError
from testbed import inputs
from testbed.errors import UsageError
from testbed.experiment.matrix import Cell, cell_label
from testbed.experiment.scenarios import parse_scenario
from testbed.judge.checker import COUNT_FIELDS
from testbed.judge.promises import breaking_words
from testbed.judge.scorecard import Row, camel
from testbed.store.files import replaced
from testbed.store.formats import Mismatch, Record, StoredEvent, published, shown
from testbed.store.history import cell_fields
from testbed.store.layout import RESULTS
from workers.strategies import STRATEGIES

# A row's: withheld when the cell saw what its plan did not make (an anomaly: the lab's failure).
Verdict = Literal["pass", "fail", "withheld"]
# A run's: incomplete when a part of the lab failed (exit 3), whatever its judged cells say.
RunVerdict = Literal["pass", "fail", "incomplete"]
# The most of a results.json read back: the article's matrix writes about 60 KB, a trial's op facts a few MB.
RESULTS_BYTES = inputs.CAP


# ---------------------------------------------------------------- a row


class LatencyStats(Record):
    """Kill to the op's next attempt, in ms, over the cell's killed ops (p99: nearest rank)."""

    min: float
    median: float
    p99: float
    max: float


class HeldOp(Record):
    """An op whose outcome the worker could not establish: held and shown, never counted as done."""

    op: str
    state: str = Field(description="unresolved or conflict")
    reason: str


class PlannedFault(Record):
    attempt: int
    boundary: str
    fault: str


class OpDifference(Record):
    """An op whose facts differ from the model's."""

    op: str
    plan: list[PlannedFault] = Field(description="The faults armed on its attempts.")
    expected: dict[str, Any] = Field(
        description="Its facts as the model predicts them (attempts, effects, outcome, ...)."
    )
    observed: dict[str, Any] = Field(description="Its facts as the run saw them.")
    events: list[StoredEvent] = Field(description="What happened to it, in time order.")


class BreakingOp(Record):
    """An op that breaks the promise a user's job is judged against."""

    op: str = Field(description="The op as the user's job was given it.")
    breach: Literal["duplicated", "missing"]
    effects: int = Field(description="In the provider's log, withdrawn ones included.")
    withdrawn: int
    requests: int = Field(description="Effect calls that reached the provider.")
    attempts: int
    job: str = Field(description="finished, failed or not over.")
    fault: str = Field(description="The faults armed on it, and whether they were reached.")
    source: str | None = Field(
        None,
        description="Where its effects were counted: null, the provider's log; else the real destination"
        " (by its host) and the evidence reader that read its records.",
    )

    def __str__(self) -> str:
        w = self
        return breaking_words(w.op, w.breach, w.effects, w.withdrawn, w.requests, w.attempts, w.job, w.fault, w.source)


class PromiseVerdict(Record):
    """A user's job judged against its promise (exactly-once, at-least-once, at-most-once)."""

    promise: str
    kept: bool
    duplicated: int = Field(description="Ops with more than one effect.")
    missing: int = Field(description="Ops with no effect and no permanent error from the provider.")
    ops: list[BreakingOp] = Field(description="The first ops that break it.")
    unreached: int = Field(0, description="Armed faults the job never reached.")


class SeriesPoint(Record):
    """A load cell's progress, `t` seconds after it started."""

    t: float
    over: int = Field(description="Jobs returned or given up so far.")
    kills: int
    effects: int = Field(description="Effects at the provider so far.")


class ResultRow(Record):
    """One cell: what the provider recorded (effects are counted from its log, never
    from the workers'), what the run did, and the verdict against the expectation."""

    strategy: str = Field(description="A built-in strategy, or a user's job as it was given (module:function).")
    boundary: str = Field(description="Where the fault struck: none (the control), a boundary, or random (load).")
    injected: bool = Field(description="A fault was armed in this cell.")
    intended: int = Field(description="Operations (logical actions) of the cell.")
    requests: int = Field(description="Effect calls that reached the provider.")
    kills: int = Field(description="Processes killed by the controller.")
    effects: int = Field(description="Effects in the provider's log.")
    duplicate_effects: int = Field(description="Effects beyond the first of an operation.")
    missing_operations: int = Field(description="Operations with no effect and no permanent error from the provider.")
    skipped_without_effect: int = Field(description="Missing operations the application skipped, believing them done.")
    fault: str = Field(
        description="The fault armed (kill, kill-worker, timeout, late, provider-crash, partition); none for a control."
    )
    scenario: str
    delivery: str | None = Field(
        None,
        description="The delivery (Celery) or recovery (Temporal) setting the cell's job ran under; absent on RQ.",
    )
    workers: int = Field(description="RQ worker processes.")
    faults: int = Field(0, description="Armed boundaries reached.")
    lookups: int = Field(0, description="Lookups of an op's reference at the provider.")
    unresolved: int = Field(0, description="Operations whose outcome the worker could not establish (held).")
    conflicts: int = Field(0, description="Operations the provider refused as a conflict (held).")
    failed_by_provider: int = Field(0, description="Operations the provider answered with a permanent error.")
    false_completions: int = Field(0, description="The local ledger says done; the provider has no effect.")
    unrecorded_effects: int = Field(0, description="The provider has the effect; the local ledger does not say done.")
    withdrawn_effects: int = 0
    jobs_failed: int = Field(0, description="Jobs RQ gave up on.")
    replays: int = Field(0, description="Attempts after an operation's first.")
    leftover_processes: int = Field(
        0,
        description="Processes the cell's jobs left in their work-horses' process groups, stopped by their"
        " workers as each work-horse ended (those that left the group are the run's, found at its end); on"
        " Celery, what a task left in its worker's group and as the pool child's own children, stopped by the"
        " pool child as the task returned (a killed pool child's are the run's).",
    )
    replay_latency_ms: LatencyStats | None = None
    wall_seconds: float
    expected: dict[str, int] = Field(
        default_factory=dict,
        description="The counts the cell must show, by name: the model's, or the user's (--expect).",
    )
    verdict: Verdict = Field(
        description="pass, fail, or withheld: the cell saw what its plan did not make (a client timeout or a"
        " failed call nobody armed, a work-horse dead with no kill of the plan), named in its differences;"
        " the run then ends as the lab's failure (exit 3)."
    )
    differences: list[str] = Field(
        default_factory=list,
        description="Each way the cell differs from its expectation, or breaks a promise; and each anomaly.",
    )
    held: list[HeldOp] = Field(default_factory=list)
    history: dict[str, list[StoredEvent]] | None = Field(
        None, description="Each watched op's events (not kept under load)."
    )
    invariants: list[str] | None = Field(
        None, description="What the strategy promises under load, checked on this row."
    )
    promise: PromiseVerdict | None = Field(None, description="A user's job's verdict against its promise.")
    cell: str | None = Field(None, description="The cell's id in the run (its lines in history.jsonl).")
    series: list[SeriesPoint] | None = Field(None, description="A load cell's progress over time.")
    op_differences: list[OpDifference] | None = Field(
        None, description="The first ops whose facts differ from the model's, when the cell differs."
    )
    op_facts: list[dict[str, Any]] | None = Field(
        None,
        description="A trial's ops, in order: what happened to each (attempts, effects, sends, lookups, outcome,"
        " jobFailed, ...), as the run saw it.",
    )
    schedule: dict[str, Any] | None = Field(
        None,
        description="A trial's schedule (boundary `schedule`), as a schedule file holds it:"
        " what happened to each attempt of each op (`testbed chaos --schedule`).",
    )

    @model_validator(mode="after")
    def _a_cell_of_the_lab(self) -> ResultRow:
        """A cell the lab can judge again: a file altered to name another is refused as it is read."""
        self.as_cell()  # ValueError for a boundary or fault the lab does not know
        parse_scenario(self.scenario)
        if self.delivery is not None and not known(self.delivery):
            raise ValueError(f"unknown delivery setting {self.delivery!r}")
        return self

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def withheld(self) -> bool:
        return self.verdict == "withheld"

    @property
    def label(self) -> str:
        """The cell's label, as the run printed it, from the row's own fields."""
        return cell_label(
            self.strategy, self.boundary, self.fault, self.scenario, self.delivery, self.injected, self.shape
        )

    @property
    def shape(self) -> tuple[int, int] | None:
        """A trial's ops and faults (None for a cell of the matrix)."""
        if self.schedule is None:
            return None
        ops = self.schedule["ops"]
        return (len(ops), sum(len(op["faults"]) for op in ops))

    def as_cell(self) -> Cell:
        """The cell the row was run for (its label is the one the run printed)."""
        handler = self.strategy not in STRATEGIES  # a user's job, named as given
        if self.schedule is not None:
            try:
                return Cell.trial(self.strategy, Schedule.from_json(self.schedule), handler, self.delivery)
            except ScheduleError as exc:
                raise UsageError(f"row {self.strategy} @ schedule: {exc}") from None
        spread = self.boundary == "random"
        boundary = None if spread else parse_boundary(self.boundary)
        fault = Fault.KILL if self.fault == "none" else Fault(self.fault)
        handled = self.strategy if handler else None
        return Cell(self.strategy, boundary, fault, self.scenario, spread, handled, delivery=self.delivery)

    def counts(self) -> dict[str, int]:
        """Every count the row carries, by its name in the file, in the file's order."""
        return {camel(name): getattr(self, name) for name in (*COUNT_FIELDS, "kills", "faults")}


# ---------------------------------------------------------------- the run


class WorkerSettings(Record):
    """RQ's own knobs for noticing dead workers (`rq worker` options)."""

    worker_ttl: int
    maintenance_interval: int
    job_monitoring_interval: int


class Destination(Record):
    """A real destination behind the lab, as the run registered it with the provider."""

    url: str = Field(description="Its base URL.")
    effects: list[str] = Field(description="Which requests were effects (--destination-effect rules).")


class GivenOptions(Record):
    """What the command was given: each command (chaos, replay, load) has its own."""

    model_config = ConfigDict(extra="allow")

    matrix: str | None = Field(None, description="chaos: article or full.")
    strategies: list[str] | None = Field(
        None, description="chaos: the strategies the matrix was narrowed to (-s); explore: those explored."
    )
    faults: list[str] | None = Field(None, description="chaos: the faults the matrix was narrowed to (-f).")
    scenarios: list[str] | None = Field(
        None, description="chaos: the scenarios the matrix was narrowed to; explore: those trials are drawn under."
    )
    ops: int = Field(description="Operations per cell (explore: at most, per trial).")
    every: int | None = Field(None, description="chaos, replay: the first attempt of every n-th op is faulted.")
    parallel: int | None = Field(None, description="Cells in flight at once.")
    workers: int | None = None
    redis: Literal["private", "shared"] | None = None
    engine: Literal["celery", "temporal"] | None = Field(None, description="The queue the jobs ran on, when not RQ.")
    celery_app: str | None = Field(None, description="The user's Celery app whose task ran (--celery-app).")
    temporal_workflow: str | None = Field(
        None, description="The user's Temporal workflow whose activity ran (--temporal-workflow)."
    )
    temporal_plugins: list[str] | None = Field(
        None, description="The Temporal plugins its workers' client took (--temporal-plugin)."
    )
    visibility_timeout: int | None = Field(
        None, description="Celery: seconds before the broker restored a killed worker's unacknowledged task."
    )
    start_to_close_timeout: float | None = Field(
        None, description="Temporal: the activity's start_to_close_timeout, seconds (--start-to-close-timeout)."
    )
    heartbeat_timeout: float | None = Field(
        None, description="Temporal: the activity's heartbeat_timeout under the heartbeat setting, seconds."
    )
    handlers: list[str] | None = Field(None, description="Users' jobs run (module:function).")
    promise: str | None = Field(None, description="What users' jobs are judged against.")
    destination: Destination | None = Field(
        None, description="The real destination users' jobs reached through the lab (--destination)."
    )
    evidence: str | None = Field(
        None, description="The reader of the destination's records (module:function) the effects were counted from."
    )
    destination_command: str | None = Field(
        None, description="The command that started the destination's sandbox with the run (--destination-command)."
    )
    kill_rate: float | None = Field(None, description="load: the chance that an attempt (not the last) is killed.")
    boundaries: list[str] | None = Field(
        None, description="chaos: the boundaries the matrix was narrowed to (-b); load: those kills are drawn from."
    )
    fault: str | None = Field(None, description="load: the fault.")
    retries: int = Field(description="RQ retries per job.")
    window: int | None = Field(None, description="load: jobs enqueued ahead of the workers at most.")
    client_timeout: float | None = Field(
        None,
        description="Seconds a worker's call to the provider may take where the fault is the client's own timeout.",
    )
    recovery: Literal["forced", "rq"] | None = Field(
        None,
        description="Who brings back the job of a worker killed whole: the controller (forced) or RQ's own"
        " maintenance.",
    )
    worker_settings: WorkerSettings | None = None
    expect: dict[str, list[int]] | None = Field(
        None, description="chaos: cell label -> [effects, missing] the user expects instead of the model's."
    )
    peak_rss_mb: float | None = Field(None, description="load: the testbed process's peak resident memory.")
    schedule: str | None = Field(None, description="chaos --schedule: the schedule file run.")
    budget: int | None = Field(None, description="explore: trials the search may run before a failure is found.")
    seconds: float | None = Field(None, description="explore: how long the search may run (--time).")
    model_only: bool | None = Field(None, description="explore: only disagreements with the model were sought.")

    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler: ModelWrapValidatorHandler[GivenOptions]) -> GivenOptions:
        made = handler(data)
        if isinstance(data, dict):
            made._order = tuple(data)
        return made

    def as_stored(self) -> dict[str, Any]:
        """The options as the file has them, in its order."""
        dumped = self.model_dump(by_alias=True, exclude_unset=True)
        return {name: dumped[name] for name in self._order if name in dumped} | dumped


class Struck(Record):
    """One (attempt, boundary, fault) an exploration armed: in how many trials, and how often it struck."""

    attempt: int
    boundary: str
    fault: str
    armed: int = Field(description="Trials whose schedule armed it.")
    struck: int = Field(description="Times it struck: its attempt ran and reached its boundary.")


class Counterexample(Record):
    """The smallest trial an exploration found that fails, shrunk on the real stack."""

    found: Literal["breach", "lab"] = Field(
        description="breach: it breaks the promise; lab: the model and the run disagree, or the controller saw"
        " what it did not plan (a bug of the lab)."
    )
    target: str = Field(description="The strategy, or the user's job (module:function), that ran it.")
    handler: bool = Field(description="The target is a user's job.")
    cell: str | None = Field(None, description="Its row's cell id.")
    schedule: dict[str, Any] = Field(description="As counterexample.json holds it (`testbed chaos --schedule`).")
    words: list[str] = Field(description="What happened to each op, one line each.")
    reproduced: int = Field(description="Fresh runs of it that failed the same way.")
    runs: int = Field(description="Fresh runs of it made to confirm it.")
    confirmed: bool = Field(
        True,
        description="It failed the same way in at least one of its fresh runs. false: unconfirmed, it failed"
        " once and in none of them (a flake of the machine, or a job that breaks only sometimes), not reported"
        " as a counterexample (explore exits 4); its schedule is kept to replay all the same. Absent from runs"
        " stored before it: read as reproduced > 0.",
    )
    replay: str = Field("", description="The command that replays it.")

    @model_validator(mode="before")
    @classmethod
    def _confirmed_of_older_runs(cls, data: Any) -> Any:
        if isinstance(data, dict) and "confirmed" not in data and isinstance(data.get("reproduced"), int):
            return {**data, "confirmed": data["reproduced"] > 0}
        return data


class TrialPhase(Record):
    """A phase of an exploration (search, shrink, confirm, or any other the search has), in the order it ran."""

    phase: str
    cells: list[str] = Field(description="Its trials' cell ids (their rows' `cell`), in the order they ran.")


class BoundedSpace(Record):
    """How much of the bounded space (every schedule of up to `depth` faults) a search tried,
    smallest first, and how."""

    depth: int = Field(description="Faults a schedule of the space holds at most.")
    schedules: int = Field(description="Schedules in the space: every target, every scenario.")
    tried: int = Field(description="Schedules whose outcome is known: ran + predicted + pruned.")
    ran: int = Field(description="Run on the real stack.")
    predicted: int = Field(description="Built-ins: predicted by the model alone, not run.")
    pruned: int = Field(
        description="A job's schedules skipped as equivalent to one run: a fault on an attempt that never ran,"
        " or at a boundary its attempt never reached, in the trial without it."
    )
    sampled: int = Field(description="Of those run, built-ins' schedules, each checking the model.")


class ExploreSummary(Record):
    """What `testbed explore` tried and found; its trials are the rows."""

    trials: int = Field(description="Trials run: searching, shrinking and confirming.")
    searched: int = Field(description="Trials run until a failure was found (or the search ended).")
    shrinking: int = Field(description="Trials run shrinking a failure (none: found smallest first).")
    confirming: int
    seconds: float
    trials_per_minute: float
    stopped: str = Field(description="Why the search ended.")
    breaches: int = Field(description="Trials that broke the promise.")
    lab_failures: int = Field(description="Trials where the model and the run disagreed, or anomalies.")
    coverage: list[Struck]
    phases: list[TrialPhase] = Field(
        default_factory=list,
        description="Each phase of the search, with its trials, in the order they ran. Absent from runs stored"
        " before it: their rows are searched, shrinking and confirming trials, in that order.",
    )
    counterexample: Counterexample | None = None
    search: Literal["smallest", "random"] = Field(
        "random",
        description="smallest: the bounded space smallest first (then at random past it, if asked);"
        " random: random schedules, the first failure shrunk. Absent from runs stored before it: random.",
    )
    bounded: BoundedSpace | None = Field(None, description="What the search tried of the bounded space.")


class Machine(Record):
    platform: str
    cpus: int | None


class Results(Record):
    """A run of `testbed chaos`, `replay`, `load` or `explore`: what it was given, what it ran on,
    and a row per cell judged. The JSON written by `--json` and kept as a stored run's
    results.json."""

    command: Literal["chaos", "replay", "load", "explore"] | None = Field(
        None, description="Absent from the oldest runs."
    )
    incomplete: bool = Field(
        False, description="A part of the stack failed during the run: the rows are the cells judged before."
    )
    failure: str | None = Field(None, description="What failed, when the run is incomplete.")
    not_run: list[str] = Field(default_factory=list, description="The cells not judged, when the run is incomplete.")
    testbed: str = Field(description="The lab's version.")
    run: str = Field(description="The run's id (its directory in the run store).")
    started_at: str = Field(description="UTC, ISO 8601.")
    wall_seconds: float
    seed: int | None = Field(description="null: explore without --seed (Hypothesis chose).")
    options: GivenOptions
    versions: dict[str, str] = Field(description="Of the lab, its libraries, Python and the Redis server.")
    machine: Machine
    verdict: RunVerdict = Field(
        description="pass: every cell as expected; fail: a cell differs; incomplete: a part of the lab failed"
        " during the run (exit 3), whatever its judged cells say (runs stored before this value say pass or"
        " fail, with incomplete true)."
    )
    leftover_processes: int = Field(
        0,
        description="Processes the jobs started and left running after their work-horses ended,"
        " all stopped by the lab: at each attempt's end (the rows' leftoverProcesses), or at the run's,"
        " where the workers ran (this machine, or each worker host).",
    )
    rows: list[ResultRow]
    explore: ExploreSummary | None = Field(
        None, description="explore: what it tried and found (its trials are the rows)."
    )

    def judged_again(self, rows: Sequence[Row]) -> Results:
        """The same run with these rows in place of its own (`testbed check`)."""
        again = [parse_row(row_json(row)) for row in rows]
        return self.model_copy(update={"rows": again, "verdict": run_verdict(self.incomplete, rows)})


# ---------------------------------------------------------------- writing


def row_json(row: Row) -> dict[str, Any]:
    """A row as results.json holds it."""
    c = row.counts
    cell = cell_fields(row.cell)
    out: dict[str, Any] = {
        "strategy": cell["strategy"],
        "boundary": cell["boundary"],
        "injected": row.cell.injected,
        "intended": c.intended,
        "requests": c.requests,
        "kills": row.kills,
        "effects": c.effects,
        "duplicateEffects": c.duplicate_effects,
        "missingOperations": c.missing_operations,
        "skippedWithoutEffect": c.skipped_without_effect,
        "fault": cell["fault"],
        "scenario": cell["scenario"],
        **({"delivery": cell["delivery"]} if "delivery" in cell else {}),
        "workers": row.workers,
        "faults": row.faults,
    }
    for name in COUNT_FIELDS:
        out.setdefault(camel(name), getattr(c, name))
    out["leftoverProcesses"] = row.leftovers
    out["replayLatencyMs"] = row.replay_latency_ms
    out["wallSeconds"] = round(row.wall_seconds, 3)
    expected = row.expected
    out["expected"] = {camel(k): v for k, v in expected.counts.items() if k not in expected.inexact}
    out["verdict"] = "withheld" if row.withheld else "pass" if row.passed else "fail"
    out["differences"] = row.problems
    out["held"] = [{"op": h.op, "state": h.state, "reason": h.reason} for h in row.held]
    kept = {
        "history": row.history,
        "invariants": row.invariants,
        "promise": row.promise,
        "opFacts": row.op_facts,
        "cell": row.cell_id,
        "series": row.series,
    }
    out.update({name: value for name, value in kept.items() if value is not None})
    if row.op_differences:
        out["opDifferences"] = [d.to_json() for d in row.op_differences]
    if row.cell.schedule is not None:
        out["schedule"] = row.cell.schedule.to_json()
    return out


def document(meta: dict[str, Any], rows: Sequence[Row]) -> dict[str, Any]:
    """The results document of a run: `meta` (what the session says of it) and its rows."""
    out = {**meta, "verdict": run_verdict(bool(meta.get("incomplete")), rows)}
    out["rows"] = [row_json(r) for r in rows]
    return out


def run_verdict(incomplete: bool, rows: Sequence[Row]) -> RunVerdict:
    """Never pass for a run the lab could not finish: its verdict is withheld."""
    if incomplete:
        return "incomplete"
    return "pass" if all(r.passed for r in rows) else "fail"


def write(path: Path, results: dict[str, Any]) -> None:
    """Whole or not at all (`testbed.store.files.replaced`): Unwritable where it cannot be."""
    with replaced(path) as out:
        out.write(text(results).encode())


def text(results: dict[str, Any]) -> str:
    """A results document as the file holds it."""
    return json.dumps(results, indent=2) + "\n"


# ---------------------------------------------------------------- reading


def parse(results: dict[str, Any] | str | bytes, where: str = RESULTS) -> Results:
    """A results document, as written or as a run holds it before writing it: Mismatch
    (one line) where it does not match. Checked as the file is, from its JSON."""
    text = json.dumps(results) if isinstance(results, dict) else results
    try:
        return Results.model_validate_json(text)
    except ValidationError as exc:
        raise Mismatch(where, "results", exc) from None


def parse_row(row: dict[str, Any]) -> ResultRow:
    """A row as `row_json` makes it."""
    return ResultRow.model_validate_json(json.dumps(row))


def read(path: Path) -> Results:
    """A results.json: Mismatch where it does not match (pydantic's parser caps its depth),
    UsageError where it cannot be read (not a regular file, or over RESULTS_BYTES)."""
    try:
        text = inputs.read_bytes(path, RESULTS_BYTES)
    except inputs.InputError as exc:
        raise UsageError(f"cannot read {shown(path)}: {exc}") from None
    return parse(text, shown(path))


def results_schema() -> dict[str, Any]:
    """The JSON Schema of results.json."""
    return published(Results.model_json_schema(), "results.json")
