"""The destination's records as the judge: a reader's answer checked, and counted as the ops' effects (pure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provider.store import ReferenceRecord
from testbed.errors import UsageError
from testbed.judge.evidence import BadEvidence, EvidenceRecords, counted_at, parse_answer
from testbed.judge.promises import breaking_words
from testbed.store.evidence import StoredEvidence, evidence_line
from testbed.store.layout import DESTINATION_RECORDS

OPS = ["run.c001:op-1", "run.c001:op-2", "run.c001:op-3"]


def test_an_answer_names_each_ops_records() -> None:
    answer = parse_answer(json.dumps({"run.c001:op-1": ["m-1"], "run.c001:op-2": ["m-2", 7]}), OPS)
    assert answer == {"run.c001:op-1": ("m-1",), "run.c001:op-2": ("m-2", "7")}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("not json", "its answer is not JSON"),
        ("[]", "its answer is a JSON list, not an object of op ids"),
        ('{"other:op": []}', "its answer names 'other:op', an op it was not asked about"),
        ('{"run.c001:op-1": "m-1"}', "its answer for 'run.c001:op-1' is not a list of record ids"),
        ('{"run.c001:op-1": [true]}', "its answer for 'run.c001:op-1' is not a list of record ids"),
        ('{"run.c001:op-1": [{"id": 1}]}', "its answer for 'run.c001:op-1' is not a list of record ids"),
        ('{"run.c001:op-1": ["m", "m"]}', "its answer for 'run.c001:op-1' names a record twice"),
    ],
)
def test_an_answer_that_is_not_evidence_says_why(text: str, why: str) -> None:
    with pytest.raises(BadEvidence) as raised:
        parse_answer(text, OPS)
    assert str(raised.value) == why


class _Log:
    def records(self, ledger: str, references: list[str]) -> dict[str, ReferenceRecord]:
        # The provider's log of a destination's ledger: forwarded requests, and no effects of its own.
        return {"op-1": ReferenceRecord(sends=2, lookups=2)}


def test_the_effects_are_the_destinations_records_and_nothing_else() -> None:
    asked: list[list[str]] = []

    def read(op_ids: list[str]) -> dict[str, tuple[str, ...]]:
        asked.append(op_ids)
        return {"run.c001:op-1": ("m-1", "m-2")}

    records = EvidenceRecords(_Log(), read)
    got = records.records("run.c001", ["op-1", "op-2"])
    assert asked == [["run.c001:op-1", "run.c001:op-2"]]
    assert got == {"op-1": ReferenceRecord(effects=2, sends=2, lookups=2), "op-2": ReferenceRecord()}
    assert records.answers == {"run.c001:op-1": ("m-1", "m-2"), "run.c001:op-2": ()}


def test_each_answer_is_kept_as_counted_and_read_back_as_it_was(tmp_path: Path) -> None:
    kept: list[str] = []
    records = EvidenceRecords(
        _Log(),
        lambda ops: {"run.c001:op-1": ("m-1", "m-2")},
        lambda ledger, held: kept.append(evidence_line(ledger, held)),
    )
    live = records.records("run.c001", ["op-1", "op-2"])
    (tmp_path / DESTINATION_RECORDS).write_text("".join(kept))
    stored = StoredEvidence(tmp_path)
    assert stored.held("run.c001") == 2
    assert EvidenceRecords(_Log(), stored.read).records("run.c001", ["op-1", "op-2"]) == live
    with pytest.raises(UsageError, match=r"has no answer for op run\.c001:op-3: it is cut short"):
        stored.read(["run.c001:op-3"])


def test_a_stored_answer_that_is_not_one_is_named(tmp_path: Path) -> None:
    (tmp_path / DESTINATION_RECORDS).write_text('{"ledger": "run.c001", "records": {"run.c001:op-1": "m-1"}}\n')
    with pytest.raises(UsageError, match=r"destination-records.jsonl:1 does not match the destination records schema"):
        StoredEvidence(tmp_path)


def test_a_breach_names_the_source_of_its_counts() -> None:
    source = counted_at("http://127.0.0.1:5055/queue", "examples.sqs_fifo:effects")
    said = breaking_words("op-1", "duplicated", 2, 0, 2, 2, "finished", "kill at after-effect on attempt 1", source)
    assert said == (
        "op-1: duplicated: the destination 127.0.0.1:5055 (read by examples.sqs_fifo:effects) held 2 records of it,"
        " from 2 requests the lab forwarded; 2 attempts; kill at after-effect on attempt 1; job finished"
    )
    assert "the provider recorded 2 effects from 2 requests" in breaking_words(
        "op-1", "duplicated", 2, 0, 2, 2, "finished", ""
    )
