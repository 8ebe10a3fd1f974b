from labcore.boundaries import ORDER, Boundary
from labcore.faults import Fault
from labcore.plan import Armed, EveryNth, Random, decode, encode


def test_article_plan_faults_the_first_attempt_of_every_tenth_op() -> None:
    plan = EveryNth(10, Boundary.AFTER_EFFECT, Fault.KILL)
    armed = {seq: plan.armed(seq) for seq in range(1, 101)}
    assert [seq for seq, a in armed.items() if a] == list(range(10, 101, 10))
    assert armed[40] == (Armed(1, Boundary.AFTER_EFFECT, Fault.KILL),)


def test_control_plan_arms_nothing() -> None:
    assert not any(EveryNth(10, None, Fault.KILL).armed(seq) for seq in range(1, 101))


def test_random_plan_is_seeded_and_never_arms_the_last_attempt() -> None:
    plan = Random(0.5, ORDER, Fault.KILL, retries=2, seed=7)
    first = [plan.armed(seq) for seq in range(1, 500)]
    assert first == [Random(0.5, ORDER, Fault.KILL, retries=2, seed=7).armed(seq) for seq in range(1, 500)]
    assert first != [Random(0.5, ORDER, Fault.KILL, retries=2, seed=8).armed(seq) for seq in range(1, 500)]
    attempts = {a.attempt for armed in first for a in armed}
    assert attempts == {1, 2}
    share = sum(bool(a) for a in first) / len(first)
    assert 0.6 < share < 0.9  # 1 - 0.5**2 = 0.75


def test_plan_encoding_round_trips() -> None:
    armed = (Armed(1, Boundary.JOB_START, Fault.KILL_WORKER), Armed(2, Boundary.BEFORE_EFFECT, Fault.LATE))
    assert decode(encode(armed)) == armed
    assert decode(None) == ()
