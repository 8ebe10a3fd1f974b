"""The RQ job that runs a user's own function for one attempt of one op.

The function is called as `function(op_id, payload)`, with the op's stable
identity and its payload, and finds its own scoped base URL at the provider
in `TESTBED_PROVIDER_URL`. Around it, in code the user did not write:

- `job-start` before the user's module is imported (anew in every work-horse,
  as `rq worker` does, so a module that reads the URL at import gets this
  attempt's), `after-record` once the function has returned, before RQ
  records the result;
- `before-request` / `after-receipt` around the attempt's first effect call,
  from the instrumented HTTP clients (`workers.http_probes`) or the user's
  `testbed.boundary(...)`;
- `before-effect` / `after-effect` in the provider, which learns the armed
  fault from the scoped URL.

What the job concludes is RQ's: the function returned (the job finishes) or
raised (RQ retries it, and in the end gives up on it).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from rq import get_current_job

from labcore import plan
from labcore.boundaries import Boundary
from labcore.bus import Bus
from labcore.events import Hit
from labcore.faults import RULES, Fault, Trigger
from labcore.keys import RunKeys
from labcore.procs import die_with_parent
from labcore.scoped import PROVIDER_ENV, Scope, base_url, sign, user_op_id
from workers import http_probes, scope, target
from workers.flow import Outcome, Result
from workers.instrument import Probe
from workers.ledger import Ledger

http_probes.install()

_DETAIL = 200  # characters of the function's return value kept as the op's outcome detail


@dataclass(frozen=True, slots=True)
class UserJobSpec:
    prefix: str
    cell: str
    handler: str  # package.module:function
    ledger: str
    provider: str  # the provider's own base URL; the job gets a scoped one
    secret: str  # signs the scoped URLs (registered with the provider for the ledger)
    paths: list[str] = field(default_factory=list)  # put on sys.path before the import
    env: dict[str, str] = field(default_factory=dict)  # set in the work-horse before the call


def perform(spec: dict[str, Any], op: str, seq: int) -> Any:
    # A work-horse whose worker was killed has no one to report to.
    die_with_parent(os.getppid())
    job = get_current_job()
    assert job is not None
    redis = job.connection
    s = UserJobSpec(**spec)
    keys = RunKeys(s.prefix)
    cell = keys.cell(s.cell)
    with redis.pipeline(transaction=False) as pipe:
        pipe.hincrby(cell.attempts, op, 1)
        pipe.hget(cell.ops, op)
        pipe.hget(cell.plan, op)
        number, raw_intent, raw_plan = pipe.execute()
    intent = json.loads(raw_intent)
    probe = Probe(Bus(redis, keys), s.cell, op, seq, number, plan.decode(raw_plan))
    probe.begin(job.enqueued_at.timestamp() if job.enqueued_at else None)
    armed = probe.provider_hit()
    base = base_url(s.provider, sign(Scope(s.ledger, op, number, armed), s.secret))
    os.environ.update(s.env)
    os.environ[PROVIDER_ENV] = base
    attempt = scope.Attempt(base, probe.at, lambda: probe.event("call-timeout"), probe.contact)
    # Held until the client gives up: if the instrumentation did not see it give up
    # (a client the lab does not instrument), the attempt's end says so.
    awaits_timeout = (
        armed is not None and RULES[Fault(Hit.from_header(armed).fault)].trigger is Trigger.CLIENT_TIMED_OUT
    )
    with scope.running(attempt):
        try:
            attempt.at(Boundary.JOB_START)
            function = target.load(s.handler, s.paths)
            try:
                value = function(user_op_id(s.ledger, op), intent["payload"])
            finally:
                if awaits_timeout:
                    attempt.call_timed_out()
            attempt.at(Boundary.AFTER_RECORD)
        except BaseException as exc:
            probe.event("attempt-end", outcome="error", error=type(exc).__name__)
            raise
    result = Result(Outcome.COMPLETED, repr(value)[:_DETAIL])
    # Reported before the job counts as ended: the run judges a cell once all its jobs have.
    probe.event("attempt-end", outcome=result.outcome.value, detail=result.detail)
    Ledger(redis, cell).finish(op, result)
    return value
