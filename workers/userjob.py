"""The RQ job that runs a user's own function for one attempt of one op.

The function is called as `function(op_id, payload)`, with the op's stable
identity and its payload, and finds its own scoped base URL at the provider
in `TESTBED_PROVIDER_URL` (and, for a real destination behind the lab, the base URL it gives
its SDK in `TESTBED_DESTINATION_URL`; for an SMTP destination, `smtp://testbed:TOKEN@host:port`,
the lab's relay with the attempt's token as the password). Around it, in code the user did not write:

- `job-start` before the user's module is imported (anew in every work-horse,
  as `rq worker` does, so a module that reads the URL at import gets this
  attempt's), `after-record` once the function has returned, before RQ
  records the result;
- `before-request` / `after-receipt` around the attempt's first effect call
  (to the provider, or to a real destination through it, an effect by the run's
  rules there), from the instrumented HTTP clients (`workers.http_probes`) or
  the user's `testbed.boundary(...)`;
- `before-effect` / `after-effect` in the provider, which learns the armed
  fault from the scoped URL.

What the job concludes is RQ's: the function returned (the job finishes) or
raised (RQ retries it, and in the end gives up on it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from labcore.boundaries import Boundary
from labcore.destination import Effects
from labcore.events import EventKind, Hit
from labcore.faults import RULES, Fault, Trigger
from labcore.scoped import (
    DESTINATION_ENV,
    DESTINATION_ROOT,
    MAIL_USER,
    PROVIDER_ENV,
    Scope,
    base_url,
    ledger_secret,
    sign,
    user_op_id,
)
from workers import client, http_probes, scope, specs
from workers.flow import Outcome, Result
from workers.instrument import Job, open_attempt, rq_job
from workers.markers import Markers

http_probes.install()

_DETAIL = 200  # characters of the function's return value kept as the op's outcome detail


@dataclass(frozen=True, slots=True)
class UserJobSpec:
    prefix: str
    cell: str
    handler: str  # package.module:function
    ledger: str
    provider: str  # the provider's own base URL; the job gets a scoped one
    paths: list[str] = field(default_factory=list)  # put on sys.path before the import
    env: dict[str, str] = field(default_factory=dict)  # set in the work-horse before the call
    # A real destination behind the lab: which requests to it are effects, as the provider is given
    # them (`labcore.destination.Effects.spelled`); None: the run has none.
    effects: list[str] | None = None
    mail_relay: str | None = None  # host:port where the provider relays SMTP, for an smtp:// destination


def perform(spec: dict[str, Any], op: str, seq: int) -> Any:
    """RQ's job function."""
    return run(rq_job(), spec, op, seq)


def run(job: Job, spec: dict[str, Any], op: str, seq: int, function: Callable[..., Any] | None = None) -> Any:
    """One attempt of the op, in the queue's job `job`: the user's function (the handler the
    spec names, imported at the attempt's start, or `function`, a task of the user's own app)."""
    s = UserJobSpec(**spec)
    opened = open_attempt(job, s.prefix, s.cell, op, seq, with_marker=False)
    redis, cell, number, intent, probe = opened.redis, opened.cell, opened.number, opened.intent, opened.probe
    armed = probe.provider_hit()
    # Signed here, from the token in the worker's environment: no secret is in the job's arguments.
    secret = ledger_secret(client.TOKEN, s.ledger)
    token = sign(Scope(s.ledger, op, number, armed), secret)
    base = base_url(s.provider, token)
    os.environ.update(s.env)
    os.environ[PROVIDER_ENV] = base
    # A destination the lab forwards to, if the run has one; the provider refuses it otherwise.
    # An SMTP one is reached at the relay, the token the password a mail client logs in with; the
    # job's mail client is not one the lab instruments, so no effect of it is seen at the client.
    proxied = base_url(s.provider, token, DESTINATION_ROOT)
    if s.mail_relay:
        os.environ[DESTINATION_ENV] = f"smtp://{MAIL_USER}:{token}@{s.mail_relay}"
    else:
        os.environ[DESTINATION_ENV] = proxied
    destination = None if s.effects is None else scope.Proxied(proxied, Effects.parse(s.effects))
    attempt = scope.Attempt(
        base, probe.at, lambda: probe.event(EventKind.CALL_TIMEOUT), probe.contact, probe.call_failed, destination
    )
    # Held until the client gives up: if the instrumentation did not see it give up
    # (a client the lab does not instrument), the attempt's end says so.
    awaits_timeout = (
        armed is not None and RULES[Fault(Hit.from_header(armed).fault)].trigger is Trigger.CLIENT_TIMED_OUT
    )
    with scope.running(attempt):
        try:
            attempt.at(Boundary.JOB_START)
            call = function or specs.load(s.handler, s.paths)
            try:
                value = call(user_op_id(s.ledger, op), intent.payload)
            finally:
                if awaits_timeout:
                    attempt.call_timed_out()
            attempt.at(Boundary.AFTER_RECORD)
        except BaseException as exc:
            probe.event(EventKind.ATTEMPT_END, outcome="error", error=type(exc).__name__, passed=_passed(attempt))
            raise
    result = Result(Outcome.COMPLETED, repr(value)[:_DETAIL])
    # Reported before the job counts as ended: the run judges a cell once all its jobs have.
    probe.event(EventKind.ATTEMPT_END, outcome=result.outcome.value, detail=result.detail, passed=_passed(attempt))
    Markers(redis, cell).finish(op, result)
    return value


def _passed(attempt: scope.Attempt) -> list[str]:
    """The boundaries the attempt passed: explore skips a strike at one its attempt never reaches."""
    return sorted(b.value for b in attempt.passed)
