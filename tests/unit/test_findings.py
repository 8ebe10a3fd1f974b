"""What a run found, in words: one source for the terminal, `testbed check`, the report and JUnit."""

from __future__ import annotations

from typing import Any

from testbed.report import findings
from testbed.store.results import ResultRow, parse_row
from tests.support.rows import row


def _rows(*rows: dict[str, Any]) -> list[ResultRow]:
    return [parse_row(r) for r in rows]


def test_the_summary_says_who_duplicates_who_loses_silently_and_who_is_exactly_once() -> None:
    rows = _rows(
        row("retry-only", "none"),
        row("retry-only", "after-effect", effects=11, duplicateEffects=1),
        row("record-before", "before-effect", effects=9, missingOperations=1, falseCompletions=1),
        row("naive", "before-effect", fault="timeout", effects=8, missingOperations=2),
        row("reconcile", "after-effect", scenario="withdrawn", unresolved=3),
        row("provider-key", "none"),
        row("provider-key", "after-effect"),
    )
    said = findings.summary(rows)
    assert said == [
        "retry-only duplicates work (1 extra effect at after-effect (kill)).",
        "record-before loses work silently (1 op missing at before-effect (kill), their jobs reporting success).",
        "naive loses work (2 ops missing at before-effect (timeout)).",
        "reconcile holds ops unresolved, never counted as done (3 ops at after-effect (kill), scenario withdrawn).",
        "provider-key is exactly-once in every cell (1 faulted, 1 not).",
    ]


def test_on_celery_each_sentence_names_the_delivery_setting_its_strategy_ran_under() -> None:
    rows = _rows(
        row("retry-only", "before-effect", effects=9, missingOperations=1, delivery="early-ack"),
        row("retry-only", "after-effect", delivery="early-ack"),
        row("retry-only", "before-effect", effects=9, missingOperations=1, delivery="acks-late"),
        row("retry-only", "after-effect", effects=11, duplicateEffects=1, delivery="reject-on-lost"),
        row("provider-key", "after-effect", delivery="reject-on-lost"),
        row("tasks:send", "after-effect", effects=11, duplicateEffects=1, delivery="app"),
    )
    assert findings.summary(rows) == [
        "celery early-ack: retry-only loses work (1 op missing at before-effect (kill)).",
        "celery acks-late: retry-only loses work (1 op missing at before-effect (kill)).",
        "celery reject-on-lost: retry-only duplicates work (1 extra effect at after-effect (kill)).",
        "celery reject-on-lost: provider-key is exactly-once in every cell (1 faulted, 0 not).",
        "celery app: tasks:send duplicates work (1 extra effect at after-effect (kill)).",
    ]


def test_no_fault_no_claim() -> None:
    assert findings.summary(_rows(row("provider-key", "none"))) == [
        "provider-key lost and repeated no work, but no fault struck it (1 cell)."
    ]


def test_a_passing_cell_with_a_bad_outcome_says_the_model_expected_it() -> None:
    passing = findings.cell_findings(parse_row(row("retry-only", "after-effect", effects=11, duplicateEffects=1)))
    assert passing.passed and passing.verdict == "as expected (model): 1 extra effect"
    clean = findings.cell_findings(parse_row(row("provider-key", "after-effect")))
    assert clean.verdict == "as expected" and clean.outcome == "exactly once"
    differs = findings.cell_findings(
        parse_row(row("retry-only", "after-effect", verdict="fail", differences=["effects expected 10, observed 11"]))
    )
    assert differs.verdict == "DIFFERS" and differs.problems == ["effects expected 10, observed 11"]


def test_held_ops_are_named_with_their_reason_in_a_passing_cell_too() -> None:
    held = [
        {"op": "tenant-demo:notification:3", "state": "unresolved", "reason": "lookup gave no authoritative answer"}
    ]
    found = findings.cell_findings(parse_row(row("reconcile", "after-effect", unresolved=1, held=held)))
    assert found.passed and found.worth_naming
    assert [(op.op, op.kind, op.text) for op in found.ops] == [
        (
            "tenant-demo:notification:3",
            findings.Kind.UNRESOLVED,
            "tenant-demo:notification:3: held unresolved: lookup gave no authoritative answer",
        )
    ]
    listed = findings.listing([parse_row(row("reconcile", "after-effect", unresolved=1, held=held))])
    assert "held unresolved: lookup gave no authoritative answer" in listed


def test_a_handlers_breaking_ops_are_named_as_the_promise_judge_words_them() -> None:
    promise = {
        "promise": "exactly-once",
        "kept": False,
        "duplicated": 1,
        "missing": 0,
        "ops": [
            {
                "op": "notification-7",
                "breach": "duplicated",
                "effects": 2,
                "withdrawn": 0,
                "requests": 2,
                "attempts": 2,
                "job": "finished",
                "fault": "kill at after-effect on attempt 1",
            }
        ],
    }
    stored = row("myjob:send", "after-effect", effects=11, duplicateEffects=1, verdict="fail", promise=promise)
    found = findings.cell_findings(parse_row(stored | {"differences": ["exactly-once: 1 op duplicated"]}))
    (op,) = found.ops
    assert op.op == "notification-7" and op.kind is findings.Kind.DUPLICATED
    assert op.text == (
        "notification-7: duplicated: the provider recorded 2 effects from 2 requests; 2 attempts;"
        " kill at after-effect on attempt 1; job finished"
    )
