"""Provider scenarios: the contract the provider runs under, how the workload
and the worker's read path are set up, and what the nemesis does to the
world between a fault and the op's next attempt."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from labcore.boundaries import ORDER, Boundary
from labcore.choices import pick
from labcore.delivery import APP, SETTINGS, Delivery
from labcore.faults import Fault
from provider.contract import Contract
from workers.strategies import STRATEGIES

# The naive reader differs from the careful one only where a read can say
# something other than "found" or "never existed"; elsewhere it adds nothing.
_CAREFUL = tuple(name for name in STRATEGIES if name != "naive-reconcile")
_ALL = tuple(STRATEGIES)

DECLINE_DOMAIN = "declined.example"
# Far beyond any run: the listing never catches up within it.
LISTING_LAG_SECONDS = 3600.0


class Nemesis(StrEnum):
    """What the controller changes after a fault, before the retry may start."""

    CHANGE_PAYLOAD = "change-payload"  # the planner re-plans the op with other arguments, same identity
    EXPIRE_KEYS = "expire-keys"  # the provider clock moves past the key retention window
    WITHDRAW = "withdraw"  # the effect of the killed attempt is withdrawn at the provider
    DUPLICATE = "duplicate"  # the planner enqueues the same op identity again while it is in flight
    REMINT = "remint"  # the planner re-creates the op under a new identity (the queue retries too)


class ReadPath(StrEnum):
    LOOKUP = "lookup"  # GET by reference: strongly consistent
    LISTING = "listing"  # a listing filtered by reference: lags, omits withdrawn effects


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    summary: str
    contract: Contract = field(default_factory=Contract)
    read_path: ReadPath = ReadPath.LOOKUP
    nemesis: Nemesis | None = None
    declines_faulted_ops: bool = False
    # Where the scenario says something, for `--matrix full`.
    boundaries: tuple[Boundary, ...] = (Boundary.AFTER_EFFECT,)
    faults: tuple[Fault, ...] = (Fault.KILL,)
    strategies: tuple[str, ...] = _CAREFUL
    client_timeout: float | None = None  # None: the run's --client-timeout
    in_full_matrix: bool = True


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "none",
            "the default contract: deduplication on, 24 h key retention, strongly consistent lookup",
            boundaries=ORDER,
            faults=(Fault.KILL, Fault.TIMEOUT, Fault.LATE, Fault.PROVIDER_CRASH),
        ),
        Scenario(
            "payload-changed",
            "the retry carries a changed payload under the same identity",
            nemesis=Nemesis.CHANGE_PAYLOAD,
        ),
        Scenario(
            "key-expired",
            "the retry arrives after the key's retention window",
            nemesis=Nemesis.EXPIRE_KEYS,
        ),
        Scenario(
            "lagging-listing",
            "no lookup by reference; the listing lags behind the log",
            contract=Contract(single_lookup=False, listing_lag_seconds=LISTING_LAG_SECONDS),
            read_path=ReadPath.LISTING,
            boundaries=(Boundary.BEFORE_EFFECT, Boundary.AFTER_EFFECT),
            strategies=_ALL,
        ),
        Scenario(
            "withdrawn",
            "the killed attempt's effect is withdrawn before the retry (lookup says 410)",
            nemesis=Nemesis.WITHDRAW,
            strategies=_ALL,
        ),
        Scenario(
            "stored-error",
            "the provider declines the faulted ops with a permanent 402, stored under the key",
            contract=Contract(decline_domain=DECLINE_DOMAIN),
            declines_faulted_ops=True,
        ),
        Scenario(
            "no-dedup",
            "the provider ignores Idempotency-Key",
            contract=Contract(dedup=False),
        ),
        # Concurrency: the same op runs twice at once, or returns under a new identity.
        Scenario(
            "duplicate-enqueue",
            "the planner enqueues the same op again while the first run's request is in flight",
            nemesis=Nemesis.DUPLICATE,
            boundaries=(Boundary.BEFORE_EFFECT,),
            faults=(Fault.HOLD,),
            strategies=_ALL,
            # The held client waits for the duplicate to start; it must not give up first.
            client_timeout=10.0,
            in_full_matrix=False,
        ),
        Scenario(
            "remint",
            "after the crash the planner re-creates the op under a new identity; the queue retries too",
            nemesis=Nemesis.REMINT,
            in_full_matrix=False,
        ),
    )
}


def parse_scenario(name: str) -> Scenario:
    return pick("scenario", name, SCENARIOS)


def celery_refusal(scenario: Scenario, delivery: str, scheduled: bool) -> str | None:
    """Why a cell of this scenario would wait for ever on Celery under `delivery` (APP: a user's
    app's own options), or None where it runs. A held op waits for its duplicate to run: a
    worker that acknowledges as the task starts takes its next message while it holds the op,
    perhaps that duplicate; and a matrix cell holds ops on every worker before their duplicates,
    sent behind the backlog (a Celery queue has no front), can start. A trial's schedule
    (explore, --schedule) holds fewer ops than there are workers."""
    if scenario.nemesis is not Nemesis.DUPLICATE:
        return None
    if delivery != APP and not SETTINGS[Delivery(delivery)].options["acks_late"]:
        return (
            f"scenario {scenario.name} under {delivery}: a worker holding an op takes the next message, which may"
            " be the op's duplicate, and both wait for ever (use --delivery acks-late or reject-on-lost)"
        )
    if not scheduled:
        return (
            f"scenario {scenario.name} on Celery: the cell holds ops on every worker before their duplicates,"
            " sent behind the backlog (a Celery queue has no front), can release them; explore it instead"
            f" (testbed explore --engine celery --delivery acks-late --scenario {scenario.name})"
        )
    return None


def check_fault(scenario: Scenario, fault: Fault) -> None:
    """The hold fault exists for the duplicate-enqueue scenario, and that scenario needs it."""
    if (fault is Fault.HOLD) != (scenario.nemesis is Nemesis.DUPLICATE):
        raise ValueError(f"scenario {scenario.name} runs with fault {', '.join(scenario.faults)}, not {fault}")
