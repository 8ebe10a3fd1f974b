"""The destination's records as the judge: a reader's answer checked, and counted as the ops' effects (pure)."""

from __future__ import annotations

import json

import pytest

from provider.store import ReferenceRecord
from testbed.judge.evidence import BadEvidence, EvidenceRecords, parse_answer

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
