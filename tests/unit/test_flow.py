"""The attempt flow, driven by scripted answers: which steps each strategy takes."""

from collections.abc import Iterable

import pytest

from labcore.answers import Lookup, Reply, Seen
from labcore.boundaries import Boundary
from workers.flow import (
    AskProvider,
    At,
    Outcome,
    ProviderUnavailable,
    ReadMarker,
    Result,
    Send,
    Step,
    Wait,
    WriteMarker,
    attempt,
    drive,
)
from workers.strategies import STRATEGIES, Marker, State


class Script:
    """Answers the flow's steps and records them."""

    def __init__(
        self, marker: Marker | None = None, replies: Iterable[Reply] = (), lookups: Iterable[Lookup] = ()
    ) -> None:
        self.marker = marker
        self.replies = list(replies)
        self.lookups = list(lookups)
        self.steps: list[Step] = []

    def __call__(self, step: Step) -> Marker | Reply | Lookup | None:
        self.steps.append(step)
        if isinstance(step, ReadMarker):
            return self.marker
        if isinstance(step, WriteMarker):
            self.marker = step.marker
        if isinstance(step, Send):
            return self.replies.pop(0)
        if isinstance(step, AskProvider):
            return self.lookups.pop(0)
        return None

    def kinds(self) -> list[str]:
        out = []
        for s in self.steps:
            if isinstance(s, At):
                out.append(s.boundary.value)
            elif isinstance(s, WriteMarker):
                out.append(f"write:{s.marker.state}")
            else:
                out.append(type(s).__name__)
        return out


def run(
    strategy: str, marker: Marker | None = None, replies: Iterable[Reply] = (), lookups: Iterable[Lookup] = ()
) -> tuple[Result, Script]:
    s = Script(marker, replies, lookups)
    result = drive(attempt(STRATEGIES[strategy], max_waits=3), s)
    return result, s


def test_record_after_sends_then_records() -> None:
    result, s = run("record-after", replies=[Reply(201, "eff_7")])
    assert result.outcome is Outcome.COMPLETED
    assert s.kinds() == [
        "job-start",
        "ReadMarker",
        "before-request",
        "Send",
        "after-receipt",
        "write:done",
        "after-record",
    ]
    assert s.marker == Marker(State.DONE, "eff_7")


def test_record_before_writes_its_marker_before_the_request() -> None:
    result, s = run("record-before", replies=[Reply(201, "eff_1")])
    assert s.kinds()[:4] == ["job-start", "ReadMarker", "write:claimed", "before-request"]
    assert result.outcome is Outcome.COMPLETED


def test_retry_only_keeps_no_ledger() -> None:
    _, s = run("retry-only", replies=[Reply(201, "eff_1")])
    assert not any(isinstance(step, (ReadMarker, WriteMarker)) for step in s.steps)


def test_skip_when_the_marker_says_done() -> None:
    result, s = run("record-before", marker=Marker(State.CLAIMED))
    assert result.outcome is Outcome.SKIPPED
    assert not any(isinstance(step, Send) for step in s.steps)


def test_reconcile_completes_from_the_providers_receipt() -> None:
    result, s = run("reconcile", marker=Marker(State.IN_PROGRESS), lookups=[Lookup(Seen.FOUND, "eff_3")])
    assert result.outcome is Outcome.RECONCILED
    assert s.marker == Marker(State.DONE, "eff_3")
    assert not any(isinstance(step, Send) for step in s.steps)


def test_reconcile_sends_once_more_on_authoritative_absence() -> None:
    result, s = run(
        "reconcile", marker=Marker(State.IN_PROGRESS), lookups=[Lookup(Seen.ABSENT)], replies=[Reply(201, "eff_9")]
    )
    assert result.outcome is Outcome.COMPLETED
    assert sum(isinstance(step, Send) for step in s.steps) == 1


def test_reconcile_holds_withdrawn_unresolved() -> None:
    result, s = run("reconcile", marker=Marker(State.IN_PROGRESS), lookups=[Lookup(Seen.WITHDRAWN)])
    assert result.outcome is Outcome.UNRESOLVED
    assert "410" in result.detail
    assert s.marker is not None and s.marker.state is State.UNRESOLVED


def test_in_flight_means_wait_and_ask_again_never_success() -> None:
    result, s = run("provider-key", replies=[Reply(409), Reply(409), Reply(201, "eff_1", replayed=True)])
    assert result.outcome is Outcome.COMPLETED
    assert s.kinds().count("Wait") == 2
    assert s.kinds().count("Send") == 3


def test_in_flight_forever_ends_unresolved() -> None:
    result, s = run("provider-key", replies=[Reply(409)] * 4)
    assert result.outcome is Outcome.UNRESOLVED
    assert s.kinds().count("Wait") == 3


def test_conflict_and_stored_error_are_held() -> None:
    result, _ = run("provider-key", replies=[Reply(422)])
    assert result.outcome is Outcome.CONFLICT
    result, s = run("provider-key", replies=[Reply(402, replayed=True)])
    assert result.outcome is Outcome.FAILED
    assert s.marker is not None and s.marker.state is State.FAILED


def test_transient_provider_error_fails_the_attempt() -> None:
    with pytest.raises(ProviderUnavailable):
        run("record-after", replies=[Reply(503)])


def test_held_marker_is_reported_as_held() -> None:
    result, _ = run("reconcile", marker=Marker(State.UNRESOLVED, "listing is empty"))
    assert (result.outcome, result.detail) == (Outcome.UNRESOLVED, "listing is empty")


def test_every_boundary_on_the_send_path_is_passed_in_order() -> None:
    _, s = run("provider-key", replies=[Reply(201, "eff_1")])
    worker_side = [step.boundary for step in s.steps if isinstance(step, At)]
    assert worker_side == [b for b in Boundary if not b.on_provider]
    assert isinstance(s.steps[0], At) and not isinstance(s.steps[-1], Wait)
