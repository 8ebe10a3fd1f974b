"""explore's bounded space (pure): every schedule of up to `depth` faults, smallest first and
kills first, each once, every part of a schedule before it; the schedules a job's trials show
equivalent to one run; what the model predicts of a built-in's."""

from labcore.boundaries import Boundary
from labcore.faults import Fault
from labcore.plan import Armed
from labcore.schedule import Schedule
from testbed.experiment.schedules import problem
from testbed.explore.bounded import op_shapes, schedules, size_of
from testbed.explore.predicted import predicted
from testbed.explore.pruning import Equivalents, OpTrace, traces
from testbed.explore.search import Search, checking
from testbed.explore.space import FAULTS, Target, Trial, strikes

B, F = Boundary, Fault
PLACES = len(strikes(FAULTS))  # (boundary, fault) pairs a strike can be
SPACE = schedules("none", 3, FAULTS, depth=2, max_ops=3, max_held=3)


def parts(schedule: Schedule) -> list[Schedule]:
    """The schedule with one strike dropped (and an op it leaves clean, unless it is the only one)."""
    out = []
    for n, op in enumerate(schedule.ops):
        for a in op:
            ops = [tuple(x for x in o if x != a) if m == n else o for m, o in enumerate(schedule.ops)]
            kept = tuple(o for o in ops if o) or ((),)
            out.append(Schedule(kept, schedule.scenario, schedule.retries))
    return out


def test_the_space_is_every_attempt_boundary_and_fault_each_once() -> None:
    assert SPACE[0] == Schedule(((),))  # the base, with no fault
    assert len(set(SPACE)) == len(SPACE) and all(problem(s) is None for s in SPACE)
    one_op = [s for s in SPACE if len(s.ops) == 1]
    assert sum(len(s.strikes) == 1 for s in one_op) == 3 * PLACES  # attempts 1 to 3 (of 4), each place
    # Two of the three attempts; but a provider crash holds no late request (`space.fitted`): with a
    # late one on the same op it is the crash alone (2 crash places x 1 late place x 2 orders x 3 pairs).
    assert sum(len(s.strikes) == 2 for s in one_op) == 3 * PLACES**2 - 2 * 1 * 2 * 3
    assert max(len(s.strikes) for s in SPACE) == 2 and max(len(s.ops) for s in SPACE) == 2


def test_smallest_first_kills_first_and_every_part_before_its_whole() -> None:
    assert [size_of(s) for s in SPACE] == sorted(size_of(s) for s in SPACE)
    first_other = next(n for n, s in enumerate(SPACE) if any(a.fault is not F.KILL for a in s.strikes))
    assert all(a.fault is F.KILL for s in SPACE[:first_other] for a in s.strikes)
    at = {s: n for n, s in enumerate(SPACE)}
    for n, schedule in enumerate(SPACE):
        assert all(at[p] < n for p in parts(schedule) if p in at), schedule
    # The worked example's counterexample, before any schedule with a fault other than a kill.
    lookup_once = Schedule(((Armed(1, B.BEFORE_REQUEST, F.KILL), Armed(2, B.AFTER_EFFECT, F.KILL)),))
    assert at[lookup_once] < first_other


def test_each_scenario_shapes_its_ops() -> None:
    assert op_shapes("duplicate-enqueue", 3, FAULTS, 1) == [(Armed(1, B.BEFORE_EFFECT, F.HOLD),)]
    assert op_shapes("duplicate-enqueue", 3, FAULTS, 2) == [] == op_shapes("remint", 3, FAULTS, 2)
    assert len(op_shapes("remint", 3, FAULTS, 1)) == 3 * PLACES
    held = schedules("duplicate-enqueue", 3, FAULTS, depth=2, max_ops=3, max_held=1)
    # The base, one op held, and (of two held, the second released) one held beside a clean one.
    assert all(len(s.held) <= 1 for s in held) and [len(s.ops) for s in held] == [1, 1, 2]


def test_a_strike_its_attempt_never_reaches_is_equivalent_to_the_run_without_it() -> None:
    base = Schedule(((),))
    kill = Armed(1, B.BEFORE_REQUEST, F.KILL)
    first = Schedule(((kill,),))

    def then(strike: Armed) -> Schedule:
        return Schedule(((kill, strike),))

    seen = Equivalents()
    # Unknown: nothing run yet, nothing pruned.
    assert seen.reduced(then(Armed(2, B.AFTER_EFFECT, F.KILL))) == then(Armed(2, B.AFTER_EFFECT, F.KILL))
    seen.saw(base, [OpTrace(1, {})])  # the op ran clean once, unwatched
    assert seen.reduced(Schedule(((Armed(2, B.JOB_START, F.KILL),),))) == base  # attempt 2 never runs
    assert seen.reduced(first) == first
    # Attempt 2 after the kill found the op at the provider: it never sent, and was the last.
    seen.saw(first, [OpTrace(2, {2: frozenset({B.JOB_START, B.AFTER_RECORD})})])
    assert seen.reduced(then(Armed(2, B.AFTER_EFFECT, F.KILL))) == first  # its effect boundary: not reached
    assert seen.reduced(then(Armed(2, B.AFTER_RECORD, F.KILL))) == then(Armed(2, B.AFTER_RECORD, F.KILL))
    assert seen.reduced(then(Armed(3, B.JOB_START, F.KILL))) == first
    # Two ops: each op's strikes are reduced on their own; an op left clean is dropped.
    assert seen.reduced(Schedule(((kill,), (Armed(2, B.JOB_START, F.KILL),)))) == first


def test_a_trace_is_read_from_a_trials_row() -> None:
    facts = [{"op": "o1", "attempts": 2}]
    history = {
        "o1": [
            {"event": "hit", "attempt": 1, "boundary": "before-request", "fault": "kill"},
            {"event": "attempt-end", "attempt": 2, "outcome": "completed", "passed": ["after-record", "job-start"]},
        ]
    }
    (trace,) = traces(facts, history)
    assert trace.attempts == 2 and trace.passed == {2: frozenset({B.JOB_START, B.AFTER_RECORD})}
    assert not trace.reaches(Armed(2, B.BEFORE_EFFECT, F.TIMEOUT))  # on the provider: its first effect call
    assert trace.reaches(Armed(2, B.AFTER_RECORD, F.KILL)) and not trace.reaches(Armed(3, B.JOB_START, F.KILL))
    assert trace.reaches(Armed(1, B.AFTER_EFFECT, F.KILL))  # attempt 1's end unseen: taken to reach all


def test_the_model_says_which_schedules_break_and_which_strikes_strike() -> None:
    kill = Schedule(((Armed(1, B.BEFORE_REQUEST, F.KILL),),))
    assert predicted("record-before", kill, "exactly-once").breaks  # the article's silent loss
    assert not predicted("provider-key", kill, "exactly-once").breaks
    assert predicted("provider-key", kill, "exactly-once").struck == 1
    never = Schedule(((Armed(2, B.JOB_START, F.KILL),),))  # attempt 1 runs clean: attempt 2 never runs
    assert predicted("provider-key", never, "exactly-once").struck == 0


def test_a_built_in_runs_a_sample_whose_strikes_strike_and_its_first_breach() -> None:
    target = Target("record-before", False)
    space = [Trial(target, s) for s in SPACE]
    search = Search((target,), ("none",), sample=5, seed=1)
    chosen = checking(space, search, "exactly-once", None)
    first = next(t for t in space if predicted("record-before", t.schedule, "exactly-once").breaks)
    assert first in chosen and 5 <= len(chosen) <= 6
    assert all(predicted("record-before", t.schedule, "exactly-once").struck == len(t.schedule.strikes)
               for t in chosen - {first})  # fmt: skip
