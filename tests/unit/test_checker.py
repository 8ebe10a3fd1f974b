"""How the checker classifies an op from the provider's records and the application's outcome."""

from typing import Any

from testbed.judge.checker import OUTCOME_WORDS, Counts, OpFacts, classify, tally
from workers.flow import Outcome


def one(**facts: Any) -> Counts:
    return tally([[OpFacts(op="op", intent="op", attempts=1, **facts)]]).counts


def test_clean_op() -> None:
    c = one(effects=1, sends=1, outcome=Outcome.COMPLETED)
    assert (c.effects, c.duplicate_effects, c.missing_operations, c.false_completions) == (1, 0, 0, 0)


def test_duplicate_is_counted_from_the_providers_log() -> None:
    c = one(effects=2, sends=2, outcome=Outcome.COMPLETED)
    assert (c.effects, c.duplicate_effects, c.missing_operations) == (2, 1, 0)


def test_skipped_without_effect_is_missing_and_a_false_completion() -> None:
    c = one(effects=0, sends=1, outcome=Outcome.SKIPPED)
    assert (c.missing_operations, c.skipped_without_effect, c.false_completions) == (1, 1, 1)


def test_unresolved_with_an_effect_is_an_unrecorded_effect_not_missing() -> None:
    result = tally([[OpFacts("op", "op", 2, effects=1, outcome=Outcome.UNRESOLVED, detail="410")]])
    c = result.counts
    assert (c.unresolved, c.missing_operations, c.unrecorded_effects) == (1, 0, 1)
    assert result.held[0].reason == "410"


def test_provider_error_is_failed_by_provider_not_missing() -> None:
    c = one(effects=0, declined=2, outcome=Outcome.FAILED)
    assert (c.failed_by_provider, c.missing_operations, c.false_completions) == (1, 0, 0)


def test_job_given_up_by_rq() -> None:
    c = one(effects=0, job_failed=True)
    assert (c.jobs_failed, c.missing_operations, c.false_completions) == (1, 1, 0)


def test_effects_count_per_logical_action_across_identities() -> None:
    """An op re-created under a new identity is still the same intended action."""
    c = tally(
        [
            [
                OpFacts("op-1", "op-1", 1, effects=1, outcome=Outcome.COMPLETED),
                OpFacts("op-1-again", "op-1", 1, effects=1, outcome=Outcome.COMPLETED),
            ]
        ]
    ).counts
    assert (c.intended, c.effects, c.duplicate_effects) == (1, 2, 1)


def test_replays_are_attempts_beyond_the_first() -> None:
    c = tally(
        [
            [OpFacts("a", "a", 2, effects=1, outcome=Outcome.COMPLETED)],
            [OpFacts("b", "b", 1, effects=1, outcome=Outcome.COMPLETED)],
        ]
    ).counts
    assert (c.intended, c.replays) == (2, 1)


def test_one_classification_worst_first() -> None:
    """Duplicated over missing over held over failed by provider over exactly once, as every report says it."""
    said = {
        (2, False, True, True): "duplicated",
        (0, False, True, True): "missing",
        (1, False, False, True): "held (unresolved or conflict)",
        (0, True, False, True): "held (unresolved or conflict)",
        (0, True, False, False): "failed by provider",
        (1, False, True, False): "exactly once",
    }
    for (effects, declined, done, held), words in said.items():
        assert OUTCOME_WORDS[classify(effects, declined, done, held).outcome] == words


def test_what_the_counts_take_from_a_classification() -> None:
    duplicated = classify(3, False, False, False)
    assert (duplicated.extra_effects, duplicated.unrecorded_effect, duplicated.false_completion) == (2, True, False)
    silent = classify(0, False, True, False)
    assert (silent.outcome, silent.false_completion, silent.failed_by_provider) == ("missing", True, False)
    declined = classify(0, True, False, False)
    assert (declined.failed_by_provider, declined.extra_effects) == (True, 0)
