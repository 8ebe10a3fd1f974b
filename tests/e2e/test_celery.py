"""`--engine celery`: real Celery workers (prefork) on the run's private Redis, their pool children
killed at the boundaries, every cell under each delivery setting held to the model; and a Celery
app of this module's own, whose task runs with its own options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from examples.naive import post
from labcore.engines.celery import Delivery
from tests.support.helpers import assert_left_nothing, left_alive, run_testbed

pytestmark = pytest.mark.e2e

ROOT = str(Path(__file__).resolve().parents[2])

# A user's app as production defines it; the lab sets where its messages and results go.
app = Celery("testbed-e2e-celery")


@app.task(acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]  # Celery ships no types
def send_email(op_id: str, payload: dict[str, Any]) -> str:
    """Sends with no key: a task requeued after its effect sends it again."""
    return post(payload, None)


def test_the_article_cells_under_every_delivery_setting_match_the_model(workdir: Path) -> None:
    # One faulted op per cell (--ops 5 --every 5): a killed pool child stalls its Celery worker
    # until the pool notices (up to its 5 s tick), so eight workers take the 32 kills.
    args = ["--engine", "celery", "--ops", "5", "--every", "5", "--workers", "8", "--parallel", "16"]
    ran = run_testbed([*args, "--no-store"], workdir, timeout=280)
    assert ran.code == 0, ran.stderr
    assert ran.results is not None
    rows = ran.json["rows"]
    assert len(rows) == 4 * 12 and all(r["verdict"] == "pass" for r in rows)
    assert {r["delivery"] for r in rows} == {d.value for d in Delivery}
    for delivery in Delivery:
        assert f"celery {delivery.value} (" in ran.stdout  # its own table

    def cell(delivery: str, strategy: str, boundary: str) -> tuple[int, int, int]:
        row = ran.row(strategy, boundary, delivery=delivery)
        return row["effects"], row["missingOperations"], row["jobsFailed"]

    # Requeued when its pool child dies: the article's trade-off, as on RQ with a retry.
    assert cell("reject-on-lost", "retry-only", "after-effect") == (6, 0, 0)
    assert cell("reject-on-lost", "record-before", "before-effect") == (4, 1, 0)
    assert cell("reject-on-lost", "provider-key", "before-effect") == (5, 0, 0)
    # Acknowledged before the kill (early ack), or failed by it (acks_late alone), or not an
    # exception (autoretry): the killed task is FAILURE and never runs again.
    for setting in ("early-ack", "acks-late", "autoretry"):
        assert cell(setting, "provider-key", "before-effect") == (4, 1, 1)
        assert cell(setting, "retry-only", "after-effect") == (5, 0, 1)
    assert_left_nothing(ran)


def test_a_celery_apps_own_task_with_acks_late_and_reject_on_worker_lost_sends_again(workdir: Path) -> None:
    here = "tests.e2e.test_celery"
    args = ["--celery-app", f"{here}:app", "--handler", f"{here}:send_email", "--path", ROOT]
    ran = run_testbed([*args, "-b", "after-effect", "--ops", "10", "--every", "5", "--no-store"], workdir)
    # The task's own options requeue it when its pool child dies after the effect: sent twice.
    assert ran.code == 1, ran.stderr
    row = ran.row(f"{here}:send_email", "after-effect", delivery="app")
    assert (row["effects"], row["duplicateEffects"], row["missingOperations"], row["kills"]) == (12, 2, 0, 2)
    assert row["verdict"] == "fail"
    assert f"the run sets in {here}:app's configuration: broker_url, result_backend" in ran.stderr
    assert "celery app (the app's own task options)" in ran.stdout
    assert_left_nothing(ran)


def test_what_a_task_leaves_running_is_stopped_and_counted_by_its_pool_child(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each op leaves a process in its worker's group and one out of it (a child of the pool
    child still); a killed pool child's are found as the run ends."""
    (pids := workdir / "pids").mkdir()
    monkeypatch.setenv("LEFTOVER_PIDS", str(pids))
    leaves = "tests.support.userjobs:leaves_a_process"
    args = ["--engine", "celery", "--delivery", "acks-late", "--handler", leaves, "-b", "none", "-b", "after-effect"]
    ran = run_testbed([*args, "--ops", "6", "--every", "3", "--no-store"], workdir)
    assert ran.code == 0, ran.stderr
    assert len(list(pids.iterdir())) == 24 and left_alive(pids) == []
    control, killed = (
        ran.row(leaves, "none", delivery="acks-late"),
        ran.row(leaves, "after-effect", delivery="acks-late"),
    )
    assert killed["kills"] == 2 and killed["jobsFailed"] == 2  # acks-late alone: a killed task is not run again
    # Two per attempt that ended; the two killed attempts' four, the run's at its end.
    assert (control["leftoverProcesses"], killed["leftoverProcesses"], ran.json["leftoverProcesses"]) == (12, 8, 24)
    assert "6 / 0 (12l)" in ran.stdout and "6 / 0 (2j 8l)" in ran.stdout
    assert_left_nothing(ran)


def test_a_worker_killed_whole_loses_an_acknowledged_task_and_the_broker_restores_the_rest(workdir: Path) -> None:
    args = ["--engine", "celery", "-f", "kill-worker", "-b", "before-effect", "-s", "provider-key"]
    args += ["--delivery", "early-ack", "--delivery", "acks-late", "--visibility-timeout", "2"]
    ran = run_testbed([*args, "--ops", "10", "--every", "5", "--no-store"], workdir, timeout=120)
    # Early ack: the task went with its worker, and nothing of Celery's says so but the broker,
    # which no longer holds it. The worker may take the next message with it too: kombu's Redis
    # transport pops a message, then records it as unacknowledged, and a kill in between loses
    # it (the cell then differs from the model, naming an op that never started).
    # acks_late: restored once the visibility timeout passed.
    assert ran.code in (0, 1), ran.stderr
    lost = ran.row("provider-key", "before-effect", delivery="early-ack")
    assert lost["kills"] == 2 and lost["effects"] + lost["missingOperations"] == 10
    assert lost["missingOperations"] >= 2 and lost["jobsFailed"] == lost["missingOperations"]
    for difference in lost.get("opDifferences") or []:
        assert difference["observed"]["attempts"] == 0, difference  # lost before it ever started
    restored = ran.row("provider-key", "before-effect", delivery="acks-late")
    assert (restored["effects"], restored["missingOperations"], restored["jobsFailed"]) == (10, 0, 0)
    assert "Celery's visibility timeout 2 s" in ran.stdout
    assert {"celery", "kombu"} <= set(ran.json["versions"])
    assert_left_nothing(ran)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--delivery", "early-ack"], "--delivery is a Celery setting: it needs --engine celery"),
        (["--engine", "celery", "--delivery", "late"], "unknown delivery setting 'late'"),
        (["--engine", "huey"], "unknown engine 'huey'"),
        (["--visibility-timeout", "5"], "--visibility-timeout is a Celery setting"),
        (["--engine", "celery", "--recovery", "rq"], "--recovery is RQ's"),
        (["--engine", "celery", "--expect", "retry-only@after-effect=110/0"], "--expect names cells of RQ's table"),
        (
            ["--celery-app", "tests.e2e.test_celery:app", "--handler", "examples.naive:send", "--path", ROOT],
            "handler examples.naive:send: not a task of the Celery app tests.e2e.test_celery:app",
        ),
        (
            ["--celery-app", "tests.e2e.test_celery:send_email", "--handler", "tests.e2e.test_celery:send_email"],
            "not a Celery app",
        ),
        # Both waited into the cell timeout (exit 3): a held op's duplicate never ran.
        (
            ["--scenario", "duplicate-enqueue", "--engine", "celery", "--delivery", "early-ack"],
            "scenario duplicate-enqueue under early-ack: a worker holding an op takes the next message",
        ),
        (
            ["--scenario", "duplicate-enqueue", "--engine", "celery", "--delivery", "acks-late"],
            "scenario duplicate-enqueue on Celery: the cell holds ops on every worker before their duplicates",
        ),
    ],
)
def test_bad_engine_options_exit_2_with_one_line(workdir: Path, args: list[str], message: str) -> None:
    ran = run_testbed([*args, "--path", ROOT, "--no-store"], workdir, timeout=60)
    assert ran.code == 2, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], ran.stderr
    assert ran.results is None
    assert_left_nothing(ran)
