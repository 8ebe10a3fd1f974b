"""The strategy table's decisions, without any I/O."""

import pytest

from labcore.answers import Lookup, Reply, Seen
from workers.strategies import (
    STRATEGIES,
    AfterSend,
    Marker,
    Next,
    Start,
    State,
    after_lookup,
    after_send,
    decide_start,
    parse_strategy,
)

CLAIMED = Marker(State.CLAIMED)
DONE = Marker(State.DONE, "eff_1")
IN_PROGRESS = Marker(State.IN_PROGRESS)


@pytest.mark.parametrize(
    ("strategy", "marker", "start"),
    [
        ("retry-only", None, Start.SEND),
        ("retry-only", DONE, Start.SEND),  # keeps no ledger: never looks
        ("record-after", None, Start.SEND),
        ("record-after", DONE, Start.SKIP),
        ("record-before", CLAIMED, Start.SKIP),  # the article's bug: intent read as completion
        ("record-before", DONE, Start.SKIP),
        ("provider-key", DONE, Start.SKIP),
        ("reconcile", IN_PROGRESS, Start.RECONCILE),
        ("reconcile", DONE, Start.SKIP),
        ("naive-reconcile", IN_PROGRESS, Start.RECONCILE),
        ("fresh-key", None, Start.SEND),
        ("reconcile", Marker(State.UNRESOLVED, "410"), Start.HOLD),
        ("provider-key", Marker(State.CONFLICT), Start.HOLD),
        ("record-after", Marker(State.FAILED, "402"), Start.HOLD),
    ],
)
def test_start_decision(strategy: str, marker: Marker | None, start: Start) -> None:
    assert decide_start(STRATEGIES[strategy], marker) is start


@pytest.mark.parametrize(
    ("seen", "careful", "naive"),
    [
        (Seen.FOUND, Next.COMPLETE, Next.COMPLETE),
        (Seen.ABSENT, Next.SEND, Next.SEND),
        (Seen.IN_FLIGHT, Next.WAIT, Next.WAIT),
        (Seen.WITHDRAWN, Next.UNRESOLVED, Next.SEND),  # 410 is evidence, not absence
        (Seen.EMPTY, Next.UNRESOLVED, Next.SEND),  # an empty listing proves nothing
        (Seen.UNKNOWN, Next.UNRESOLVED, Next.UNRESOLVED),
    ],
)
def test_lookup_readers(seen: Seen, careful: Next, naive: Next) -> None:
    assert after_lookup(STRATEGIES["reconcile"], Lookup(seen)) is careful
    assert after_lookup(STRATEGIES["naive-reconcile"], Lookup(seen)) is naive


def test_careful_reader_rejects_a_found_effect_with_another_payload() -> None:
    assert after_lookup(STRATEGIES["reconcile"], Lookup(Seen.FOUND, "eff_1", same_payload=False)) is Next.CONFLICT
    assert after_lookup(STRATEGIES["naive-reconcile"], Lookup(Seen.FOUND, "eff_1", same_payload=False)) is Next.COMPLETE


@pytest.mark.parametrize(
    ("status", "answer"),
    [
        (201, AfterSend.DONE),
        (200, AfterSend.DONE),
        (409, AfterSend.WAIT),
        (422, AfterSend.CONFLICT),
        (402, AfterSend.FAILED),
        (503, AfterSend.RETRY),
        (500, AfterSend.RETRY),
    ],
)
def test_send_answers(status: int, answer: AfterSend) -> None:
    assert after_send(Reply(status)) is answer


def test_marker_round_trip() -> None:
    marker = Marker(State.UNRESOLVED, "listing is empty | twice")
    assert Marker.decode(marker.encode().encode()) == marker
    assert Marker.decode(None) is None


def test_unknown_strategy_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown strategy 'nope'.*retry-only"):
        parse_strategy("nope")
