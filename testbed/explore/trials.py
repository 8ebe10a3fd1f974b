"""Trials on the real stack: a batch of schedules run as parallel cells on a
started stack, each judged as a cell is (built-ins against the model and the
promise, users' jobs against their promise), and what each trial found.

The outcome of a trial is remembered: the search sees one answer per trial,
however often Hypothesis asks (timing can change what a rerun shows, so
whether a counterexample reproduces is measured apart, by `confirm`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from testbed.errors import RunFailure
from testbed.experiment.matrix import Cell
from testbed.explore.space import Trial
from testbed.infra.stack import RunStack
from testbed.judge.scorecard import Row
from testbed.lab.destination import Reader
from testbed.lab.options import RunOptions, scheduled
from testbed.lab.session import run_cells
from testbed.store.runs import RunDir


class Found(StrEnum):
    KEPT = "kept"  # the promise held (and a built-in did what the model predicts)
    BREACH = "breach"  # the promise broke: a finding about the strategy or the job
    LAB = "lab"  # the model and the run disagree, or the controller saw what it did not plan: a bug of the lab


@dataclass(frozen=True, slots=True)
class TrialResult:
    trial: Trial
    row: Row
    found: Found
    phase: str  # the search's phase that ran it (search, shrink, confirm, ...): the report groups trials by it


def found_in(row: Row) -> Found:
    if row.differences or row.op_differences or row.anomalies:
        return Found.LAB
    promise = row.promise
    return Found.BREACH if promise is not None and not promise["kept"] else Found.KEPT


def sought(found: Found, model_only: bool) -> bool:
    """What a search takes for a failure, to shrink and confirm: a failure of the lab, or, unless
    it looks for disagreements with the model only, a breach of the promise. A stored
    exploration is judged again by it (`testbed check`), not by its rows' verdicts: under
    --model-only a breach the model predicts fails its row but is not what was sought."""
    return found is Found.LAB or (found is Found.BREACH and not model_only)


@dataclass(frozen=True, slots=True)
class TrialSettings:
    """What every trial of an exploration shares (the rest of `RunOptions`)."""

    retries: int
    seed: int = 0
    promise: str = "exactly-once"
    client_timeout: float = 0.5
    cell_timeout: float = 120.0
    paths: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    delivery: str | None = None  # the Celery delivery setting trials run under; None: RQ
    reader: Reader | None = None  # a real destination's evidence reader: its records judge the trials


class Trials:
    """Runs trials on a started stack; `judged` keeps every one run, in order."""

    def __init__(
        self,
        stack: RunStack,
        settings: TrialSettings,
        run_dir: RunDir | None = None,
        heard: Callable[[TrialResult, str], None] = lambda judged, phase: None,
        prefix: str = "e",
    ) -> None:
        """`prefix` starts the trials' cell ids: unique per stack (the pytest plugin explores many times)."""
        self._prefix = prefix
        self._stack = stack
        self.settings = settings
        self._run_dir = run_dir
        self._heard = heard
        self._known: dict[Trial, TrialResult] = {}
        self._batches = 0
        self.judged: list[TrialResult] = []
        self.rows: list[Row] = []  # as the stored run keeps them: every trial run
        self.started = time.monotonic()

    @property
    def workers(self) -> int:
        """The workers the trials share (every host's, across hosts)."""
        return self._stack.options.workers

    def seen(self, trial: Trial) -> bool:
        """The trial has been run (and its outcome is known)."""
        return trial in self._known

    def outcome(self, trials: Sequence[Trial], phase: str) -> list[TrialResult]:
        """Each trial's outcome: run now (the new ones, at once), or as first seen."""
        self.run(list(dict.fromkeys(t for t in trials if t not in self._known)), phase)
        return [self._known[t] for t in trials]

    def run(
        self,
        trials: Sequence[Trial],
        phase: str,
        parallel: int | None = None,
        until: Callable[[TrialResult], bool] | None = None,
    ) -> list[TrialResult]:
        """These trials run now, whatever was seen before: `parallel` at a time (all at once if
        None), each started as one ends. Once one makes `until` true no further trial starts:
        the outcomes are of the trials run, the first ones (they start in order)."""
        if not trials:
            return []
        s = self.settings
        self._batches += 1
        cells = [Cell.trial(t.target.name, t.schedule, t.target.handler, s.delivery) for t in trials]
        out: dict[int, TrialResult] = {}  # by the trial's index, as each is judged

        def judged(index: int, total: int, row: Row) -> None:
            result = out[index] = TrialResult(trials[index - 1], row, found_in(row), phase)
            self._known.setdefault(result.trial, result)  # as first seen: a confirmation reruns it
            self.judged.append(result)
            self._heard(result, phase)

        options = RunOptions(
            cells=cells,
            plan=scheduled,
            ops=max(len(t.schedule.ops) for t in trials),
            retries=s.retries,
            seed=s.seed,
            client_timeout=s.client_timeout,
            cell_timeout=s.cell_timeout,
            parallel=len(cells) if parallel is None else min(parallel, len(cells)),
            promise=s.promise,
            paths=s.paths,
            env=s.env,
            cell_prefix=f"{self._prefix}{self._batches}c",
            reader=s.reader,
            until=None if until is None else (lambda index, row: until(out[index])),
        )
        ran = run_cells(self._stack, options, judged, None, self._run_dir)
        self.rows += ran.rows
        if ran.failure is not None:
            raise RunFailure(ran.failure)
        return [out[i] for i in sorted(out)]
