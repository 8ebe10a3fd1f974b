"""The worked examples and users' jobs through the pytest plugin's `lab` (one stack for the module's tests):
private Redis, provider process, real RQ workers, real SIGKILLs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from labcore.boundaries import Boundary
from labcore.schedule import Schedule
from testbed.errors import UsageError
from testbed.infra.redis_server import PrivateRedis
from testbed.judge.scorecard import Row
from testbed.plugin import Lab
from tests.support.postgres import private_postgres

pytestmark = pytest.mark.e2e

ROOT = str(Path(__file__).resolve().parents[2])
WORKER_SIDE = ["job-start", "before-request", "after-receipt", "after-record"]
SIX = ["job-start", "before-request", "before-effect", "after-effect", "after-receipt", "after-record"]


@pytest.fixture
def db(tmp_path: Path) -> dict[str, str]:
    """The examples' own database, private to the test."""
    return {"EXAMPLES_DB": str(tmp_path / "jobs.sqlite3")}


def counts(row: Row) -> tuple[int, int, int]:
    return row.counts.effects, row.counts.missing_operations, row.faults


def test_naive_job_duplicates_after_the_effect(lab: Lab, db: dict[str, str]) -> None:
    rows = lab.run("examples.naive:send", ops=50, env=db, paths=[ROOT])
    assert counts(rows.row("none")) == (50, 0, 0)
    assert counts(rows.row("before-effect")) == (50, 0, 5)
    after = rows.row("after-effect")
    assert counts(after) == (55, 0, 5)
    assert after.counts.duplicate_effects == 5 and after.counts.jobs_failed == 0
    with pytest.raises(AssertionError) as failed:
        rows.assert_exactly_once()
    message = str(failed.value)
    assert "examples.naive:send @ after-effect (kill): exactly-once: 5 ops duplicated" in message
    for seq in (10, 20, 30, 40, 50):
        assert f"c003:tenant-demo:notification:{seq}: duplicated: the provider recorded 2 effects" in message
    assert "kill at after-effect on attempt 1; job finished" in message
    rows.assert_at_least_once()
    with pytest.raises(AssertionError, match="at-most-once: 5 ops duplicated"):
        rows.assert_at_most_once()


def test_keyed_job_is_exactly_once_under_every_fault(lab: Lab, db: dict[str, str]) -> None:
    rows = lab.run(
        "examples.keyed:send",
        boundaries=["before-effect", "after-effect"],
        faults=["kill", "kill-worker", "timeout", "late"],
        ops=30,
        env=db,
        paths=[ROOT],
    )
    assert {(r.cell.where, r.cell.fault.value) for r in rows} == {
        ("before-effect", "kill"),
        ("after-effect", "kill"),
        ("before-effect", "kill-worker"),
        ("after-effect", "kill-worker"),
        ("before-effect", "timeout"),
        ("after-effect", "timeout"),
        ("before-effect", "late"),
    }
    for row in rows:
        assert counts(row) == (30, 0, 3), row.cell.label
        assert row.counts.jobs_failed == 0, row.cell.label
    assert rows.row("after-effect", "kill-worker").kills == 3
    rows.assert_exactly_once()


def test_reconciling_job_with_its_state_in_sqlite(lab: Lab, db: dict[str, str]) -> None:
    rows = lab.run("examples.reconciling:send", boundaries=SIX, faults=["kill", "timeout", "late"], ops=30, env=db)
    assert len(rows) == 9
    for row in rows:
        assert counts(row) == (30, 0, 3), row.cell.label
    # After the effect, the retry found it by lookup instead of sending again.
    after = rows.row("after-effect")
    assert (after.counts.requests, after.counts.lookups) == (30, 3)
    rows.assert_exactly_once()


def test_reconciling_job_holds_what_it_cannot_establish(lab: Lab, db: dict[str, str]) -> None:
    rows = lab.run("examples.reconciling:send", boundaries=["after-effect"], scenarios=["withdrawn"], ops=20, env=db)
    (row,) = rows
    # The lookup says 410: the job raises rather than send again; RQ shows it failed.
    assert (row.counts.effects, row.counts.withdrawn_effects, row.counts.jobs_failed) == (20, 2, 2)
    rows.assert_exactly_once()


@pytest.fixture(scope="module")
def idempotency_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The library's own store: a Redis of the job's, not the lab's."""
    server = PrivateRedis(tmp_path_factory.mktemp("idempotency"))
    url = server.start()
    yield {"IDEMPOTENCY_REDIS_URL": url}
    server.stop()


def test_powertools_idempotency_under_the_crash_matrix(lab: Lab, idempotency_redis: dict[str, str]) -> None:
    rows = lab.run(
        "examples.powertools_job:send",
        boundaries=["before-request", "before-effect", "after-effect", "after-record"],
        faults=["kill", "timeout"],
        ops=20,
        every=5,
        env=idempotency_redis,
    )
    # Killed after the library's INPROGRESS record: the retry is refused (the record has no
    # lease outside Lambda) and the op is lost, its job failed.
    for where in ("before-request", "before-effect"):
        row = rows.row(where)
        assert (row.counts.effects, row.counts.missing_operations, row.counts.jobs_failed) == (16, 4, 4), where
    # Killed after the effect: no duplicate, but the job fails all the same.
    after = rows.row("after-effect")
    assert (after.counts.effects, after.counts.duplicate_effects, after.counts.jobs_failed) == (20, 0, 4)
    # Killed after the COMPLETED record: the retry gets the stored result.
    assert counts(rows.row("after-record")) == (20, 0, 4)
    # A timeout after the effect: the library deletes its record on the exception, and the retry sends again.
    timed_out = rows.row("after-effect", "timeout")
    assert (timed_out.counts.effects, timed_out.counts.duplicate_effects, timed_out.counts.jobs_failed) == (24, 4, 0)
    assert counts(rows.row("before-effect", "timeout")) == (20, 0, 4)
    with pytest.raises(AssertionError) as failed:
        rows.assert_exactly_once()
    assert "examples.powertools_job:send @ before-effect (kill): exactly-once: 4 ops missing" in str(failed.value)
    assert "examples.powertools_job:send @ after-effect (timeout): exactly-once: 4 ops duplicated" in str(failed.value)
    assert "job failed" in str(failed.value)


@pytest.mark.parametrize(
    "handler", ["tests.support.userjobs:send_with_requests", "tests.support.userjobs:send_with_httpx"]
)
def test_all_six_boundaries_are_hit_in_code_the_user_did_not_edit(lab: Lab, handler: str) -> None:
    rows = lab.run(handler, boundaries=SIX, ops=20, every=5, paths=[ROOT])
    assert [r.cell.where for r in rows] == SIX
    for row in rows:
        assert (row.faults, row.kills) == (4, 4), row.cell.label
        assert (row.counts.effects, row.counts.missing_operations) == (20, 0), row.cell.label
    rows.assert_exactly_once()


def test_a_client_the_lab_does_not_instrument(lab: Lab) -> None:
    marked = lab.run("tests.support.userjobs:send_with_urllib", boundaries=WORKER_SIDE, ops=10, every=5, paths=[ROOT])
    assert [r.faults for r in marked] == [2, 2, 2, 2]
    marked.assert_exactly_once()
    unmarked = lab.run(
        "tests.support.userjobs:send_with_urllib_unmarked", boundaries=["before-request"], ops=10, every=5, paths=[ROOT]
    )
    assert unmarked[0].faults == 0
    with pytest.raises(AssertionError, match="2 armed faults never reached"):
        unmarked.assert_exactly_once()


def test_built_in_strategies_run_beside_a_handler(lab: Lab, db: dict[str, str]) -> None:
    rows = lab.run("examples.keyed:send", strategies=["record-after"], boundaries=["after-effect"], ops=20, env=db)
    assert [(r.cell.strategy, counts(r)) for r in rows] == [
        ("record-after", (22, 0, 2)),
        ("examples.keyed:send", (20, 0, 2)),
    ]
    assert all(r.passed for r in rows)  # the strategy against the model, the handler against its promise
    assert "examples.keyed:send" in rows.table()


def test_a_job_that_raises_fails_and_the_run_goes_on(lab: Lab, db: dict[str, str]) -> None:
    handlers = ["tests.support.userjobs:raises", "examples.keyed:send"]
    rows = lab.run(handlers, boundaries=["none"], ops=10, env=db, paths=[ROOT])
    raised = rows.row(handler="tests.support.userjobs:raises")
    assert (raised.counts.effects, raised.counts.missing_operations, raised.counts.jobs_failed) == (0, 10, 10)
    assert raised.counts.replays == 10  # RQ retried each once before giving up
    assert counts(rows.row(handler="examples.keyed:send")) == (10, 0, 0)
    with pytest.raises(AssertionError, match="job failed"):
        rows.assert_at_least_once()


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        ("tests.support.broken_job:send", "cannot import tests.support.broken_job: ModuleNotFoundError"),
        ("tests.support.userjobs:NOT_A_FUNCTION", "NOT_A_FUNCTION is not callable (it is a int)"),
        ("tests.support.userjobs", "must be MODULE:FUNCTION"),
    ],
)
def test_bad_handlers_are_refused_before_any_work(lab: Lab, handler: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        lab.run(handler, paths=[ROOT])


def test_reconciling_job_with_its_state_in_postgresql(lab: Lab) -> None:
    import psycopg

    with private_postgres() as url:
        rows = lab.run(
            "examples.reconciling:send",
            boundaries=["before-request", "before-effect", "after-effect", "after-record"],
            faults=["kill", "timeout"],
            ops=20,
            every=5,
            env={"DATABASE_URL": url},
        )
        for row in rows:
            assert counts(row) == (20, 0, 4), row.cell.label
        rows.assert_exactly_once()
        with psycopg.connect(url) as db:  # the job's own records are there, every op done
            states = db.execute("SELECT state, count(*) FROM example_jobs GROUP BY state").fetchall()
        assert states == [("done", 20 * len(rows))]


@pytest.mark.slow
def test_explore_finds_what_the_matrix_misses_and_shrinks_it(lab: Lab, db: dict[str, str]) -> None:
    # examples.lookup_once passes every cell of the full matrix (test_explore.py); two faults on one op,
    # the second on the recovery attempt, break it.
    with pytest.raises(AssertionError) as failed:
        lab.explore("examples.lookup_once:send", budget=300, seed=1, env=db, paths=[ROOT])
    message = str(failed.value)
    assert message.startswith("exactly-once does not hold for examples.lookup_once:send: the smallest schedule found")
    words = [line.strip() for line in message.splitlines() if line.strip().startswith("op ")]
    assert len(words) == 1 and words[0].endswith("job finished: duplicated"), message
    schedule = Schedule.decode(message[message.index("{") :])
    (op,) = schedule.ops
    assert len(op) == 2 and op[1].attempt == 2  # the recovery attempt, struck after its resend's effect
    assert op[1].boundary in (Boundary.AFTER_EFFECT, Boundary.AFTER_RECEIPT), schedule


def test_explore_passes_a_job_that_keeps_its_promise(lab: Lab, db: dict[str, str]) -> None:
    done = lab.explore("examples.keyed:send", budget=12, seed=2, env=db, paths=[ROOT], scenarios=["none"])
    assert done.counterexample is None and len(done.trials.judged) == 12
    # Smallest first, as the command's default: the base schedule, then one fault at a time.
    assert [len(t.trial.schedule.strikes) for t in done.trials.judged] == sorted(
        len(t.trial.schedule.strikes) for t in done.trials.judged
    )
    assert {t.phase for t in done.trials.judged} == {"enumerate"}
    with pytest.raises(UsageError, match="choose 'smallest' or 'random'"):
        lab.explore("examples.keyed:send", search="sideways")
