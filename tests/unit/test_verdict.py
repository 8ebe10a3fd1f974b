"""One verdict for every row; a row that differs from the model names the ops that differ."""

from dataclasses import replace

from labcore.boundaries import Boundary
from labcore.faults import Fault
from labcore.plan import EveryNth, Plan, Random
from testbed.experiment.matrix import Cell
from testbed.judge.checker import OpFacts
from testbed.judge.model import predict_ops
from testbed.judge.observer import CellObservations
from testbed.judge.verdict import MAX_NAMED_OPS, Judgement, judge
from testbed.store.results import row_json

CELL = Cell("record-after", Boundary.AFTER_EFFECT)
PLAN = EveryNth(10, Boundary.AFTER_EFFECT, Fault.KILL)


def model_facts(cell: Cell = CELL, plan: Plan = PLAN, ops: int = 100) -> list[list[OpFacts]]:
    """What a faithful run would observe: the model's own per-op facts."""
    return [facts for _, facts, _, _ in predict_ops(cell, plan, ops, 1)]


def seen(kills: int, faults: int) -> CellObservations:
    s = CellObservations()
    s.kill_count, s.faults = kills, faults
    return s


def test_a_faithful_run_passes_and_names_nothing() -> None:
    row = judge(Judgement(CELL, PLAN, 100, 1), model_facts(), seen(10, 10), 4, 1.0)
    assert row.passed and row.op_differences == []
    assert (row.counts.effects, row.counts.duplicate_effects) == (110, 10)


def test_an_effect_missing_from_the_log_is_named_with_its_plan_and_facts() -> None:
    observed = model_facts()
    # Op 20 was faulted after the effect and sent twice; the provider's log lost one of its effects.
    observed[19] = [replace(observed[19][0], effects=1)]
    observed[36] = [replace(observed[36][0], effects=0)]  # op 37: never faulted, its only effect gone
    row = judge(Judgement(CELL, PLAN, 100, 1), observed, seen(10, 10), 4, 1.0)
    assert not row.passed
    assert "effects expected 110, observed 108" in row.problems[0]
    named = {d.op: d for d in row.op_differences}
    assert set(named) == {"tenant-demo:notification:20", "tenant-demo:notification:37"}
    twenty = named["tenant-demo:notification:20"]
    assert twenty.plan == [{"attempt": 1, "boundary": "after-effect", "fault": "kill"}]
    assert (twenty.expected["effects"], twenty.observed["effects"]) == (2, 1)
    assert named["tenant-demo:notification:37"].plan == []
    assert row_json(row)["opDifferences"][0]["op"] == "tenant-demo:notification:20"


def test_the_named_ops_are_capped() -> None:
    observed = [[replace(facts[0], effects=0)] for facts in model_facts()]
    row = judge(Judgement(CELL, PLAN, 100, 1), observed, seen(10, 10), 4, 1.0)
    assert len(row.op_differences) == MAX_NAMED_OPS


def test_load_rows_are_judged_by_the_same_verdict_with_promises() -> None:
    cell = Cell("provider-key", None, Fault.KILL, spread=True)
    plan = Random(0.3, (Boundary.AFTER_EFFECT,), Fault.KILL, 1, 7)
    observed = model_facts(cell, plan, 50)
    kills = sum(len(plan.armed(seq)) for seq in range(1, 51))
    assert judge(Judgement(cell, plan, 50, 1, promises=True), observed, seen(kills, kills), 4, 1.0).passed
    observed[0] = [replace(observed[0][0], effects=2)]
    row = judge(Judgement(cell, plan, 50, 1, promises=True), observed, seen(kills, kills), 4, 1.0)
    assert "no effect twice: duplicateEffects = 1" in row.problems
    assert row_json(row)["invariants"]
