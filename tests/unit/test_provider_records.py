"""What a remote provider said of a run's ops, kept in the run's directory as judged, and read back."""

import json
from pathlib import Path

import pytest

from provider.store import ReferenceRecord
from testbed.errors import UsageError
from testbed.store.history import records_line
from testbed.store.layout import PROVIDER_RECORDS
from testbed.store.runs import RunDir, StoredRecords

OPS = [f"op-{n}" for n in range(1, 1501)]


def test_the_records_kept_as_the_run_judged_are_read_back(tmp_path: Path) -> None:
    said = {
        "run.c001": {op: ReferenceRecord(effects=1, sends=1) for op in OPS[:-1]} | {OPS[-1]: ReferenceRecord()},
        "run.c002": {"op-1": ReferenceRecord(effects=2, sends=2, lookups=1), "op-1:again": ReferenceRecord(sends=1)},
    }
    run = RunDir(tmp_path)
    for ledger, records in said.items():
        for op, record in records.items():  # a line per logical action, as the runner writes them
            run.keep_records(records_line(ledger, {op: record}))
    run.close()
    kept = StoredRecords(tmp_path)
    for ledger, records in said.items():
        assert kept.records(ledger, list(records)) == records
    assert kept.records("run.c001", [OPS[-1]]) == {OPS[-1]: ReferenceRecord()}  # an op that left no trace


@pytest.mark.parametrize(("ledger", "op"), [("run.c001", "op-2"), ("another-run.c001", "op-1")])
def test_an_op_the_records_do_not_hold_is_a_file_cut_short(tmp_path: Path, ledger: str, op: str) -> None:
    """The run keeps a record of every op it judged, one that left no trace too: an op
    without one would be judged missing, a finding made of a damaged file."""
    run = RunDir(tmp_path)
    run.keep_records(records_line("run.c001", {"op-1": ReferenceRecord(effects=1, sends=1)}))
    run.close()
    with pytest.raises(UsageError, match=rf"provider-records\.jsonl has no record of op {op} \(ledger {ledger}\)"):
        StoredRecords(tmp_path).records(ledger, ["op-1", op])


def test_a_run_on_its_own_provider_writes_no_records_file(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.jsonl"]


@pytest.mark.parametrize(
    "line", ["not json", json.dumps({"ledger": "x"}), json.dumps({"ledger": "x", "records": {"op-1": {"x": 1}}})]
)
def test_a_records_file_the_lab_did_not_write_is_refused_in_one_line(tmp_path: Path, line: str) -> None:
    path = tmp_path / PROVIDER_RECORDS
    path.write_text(line + "\n")
    with pytest.raises(UsageError, match=r"provider-records\.jsonl:1 does not match the provider records schema: "):
        StoredRecords(tmp_path)
