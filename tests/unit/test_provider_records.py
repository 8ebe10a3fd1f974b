"""What a remote provider recorded of a run's ops, kept in the run's directory and read back."""

import json

import pytest

from provider.store import ReferenceRecord
from testbed.errors import UsageError
from testbed.lab.store import CELL, FACTS, PROVIDER_RECORDS, RunDir, StoredRecords

OPS = [f"op-{n}" for n in range(1, 1501)]  # more than one line's worth


class Audit:
    """A provider's audit route as the lab sees it: records of the references it knows."""

    def __init__(self, known: dict[str, dict[str, ReferenceRecord]], fail_after: int | None = None) -> None:
        self.known = known
        self.asked: list[tuple[str, int]] = []
        self._fail_after = fail_after

    def records(self, ledger: str, references: list[str]) -> dict[str, ReferenceRecord]:
        if self._fail_after is not None and len(self.asked) == self._fail_after:
            raise ValueError("the provider went away")
        self.asked.append((ledger, len(references)))
        kept = self.known.get(ledger, {})
        return {name: kept[name] for name in references if name in kept}


@pytest.fixture
def run_dir(tmp_path) -> RunDir:
    """A run's history: two cells, each op's local facts as its cell was judged."""
    run = RunDir(tmp_path)
    run.record(CELL, cell="c001", ledger="run.c001")
    run.record(CELL, cell="c002", ledger="run.c002")
    for op in OPS:
        run.record(FACTS, cell="c001", intent=op, ops=[{"op": op}])
    run.record(FACTS, cell="c002", intent="op-1", ops=[{"op": "op-1"}, {"op": "op-1:again"}])  # a re-minted op
    run.close()
    return run


def test_the_records_of_every_op_in_the_history_are_kept_and_read_back(run_dir):
    known = {
        "run.c001": {op: ReferenceRecord(effects=1, sends=1) for op in OPS[:-1]},  # the last op left no trace
        "run.c002": {"op-1": ReferenceRecord(effects=2, sends=2, lookups=1), "op-1:again": ReferenceRecord(sends=1)},
    }
    audit = Audit(known)
    run_dir.keep_provider_records(audit)
    assert audit.asked == [("run.c001", 1000), ("run.c001", 500), ("run.c002", 2)]
    kept = StoredRecords(run_dir.path / PROVIDER_RECORDS)
    for ledger, records in known.items():
        assert kept.records(ledger, [*records, "op-unknown"]) == records
    assert kept.records("run.c001", [OPS[-1]]) == {}
    assert kept.records("another-run.c001", ["op-1"]) == {}


def test_a_provider_that_fails_midway_leaves_no_records_file(run_dir):
    with pytest.raises(ValueError, match="went away"):
        run_dir.keep_provider_records(Audit({}, fail_after=1))
    assert sorted(p.name for p in run_dir.path.iterdir()) == ["history.jsonl"]


@pytest.mark.parametrize(
    "line", ["not json", json.dumps({"ledger": "x"}), json.dumps({"ledger": "x", "records": {"op-1": {"x": 1}}})]
)
def test_a_records_file_the_lab_did_not_write_is_refused_in_one_line(tmp_path, line):
    path = tmp_path / PROVIDER_RECORDS
    path.write_text(line + "\n")
    with pytest.raises(UsageError, match="not a provider's records"):
        StoredRecords(path)
