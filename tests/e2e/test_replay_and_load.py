"""Killed jobs coming back, the planner re-running ops, and strategies under load with many workers."""

from pathlib import Path

import pytest

from tests.support.helpers import BackgroundRuns, Ran, assert_left_nothing, finish, run_testbed

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def worker_kills(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    args = ["--fault", "kill-worker", "-s", "provider-key", "-s", "retry-only", "-b", "after-effect", "--ops", "20"]
    return run_testbed(args, tmp_path_factory.mktemp("kill-worker"))


def test_killed_workers_jobs_replay_in_a_new_worker_process(worker_kills: Ran) -> None:
    assert worker_kills.code == 0, worker_kills.stdout + worker_kills.stderr
    row = worker_kills.row("provider-key", "after-effect")
    assert (row["fault"], row["kills"], row["replays"], row["effects"], row["duplicateEffects"]) == (
        "kill-worker",
        2,
        2,
        20,
        0,
    )
    assert row["replayLatencyMs"]["max"] > 0
    for op in ("tenant-demo:notification:10", "tenant-demo:notification:20"):
        events = row["history"][op]
        kinds = [e["event"] for e in events]
        assert kinds.index("killed") < kinds.index("worker-restarted") < kinds.index("recovered")
        killed = next(e for e in events if e["event"] == "killed")
        first, second = (e for e in events if e["event"] == "attempt-start")
        assert killed["worker"] == first["worker"] and second["attempt"] == 2
        assert second["worker"] != killed["worker"] and second["pid"] != first["pid"]
        # Both the worker and its work-horse, each held by pidfd and confirmed gone before anything went on.
        assert len(killed["pids"]) == 2 and killed["confirmedMs"] < 5000
    assert worker_kills.row("retry-only", "after-effect")["duplicateEffects"] == 2
    assert_left_nothing(worker_kills)


def test_replay_prints_each_killed_ops_timeline(workdir: Path) -> None:
    ran = run_testbed(["--ops", "10", "--every", "5", "--fault", "kill"], workdir, command="replay")
    assert ran.code == 0, ran.stdout + ran.stderr
    assert "tenant-demo:notification:5  (replayed" in ran.stdout
    assert "killed at after-effect: work-horse of" in ran.stdout
    assert "attempt 2 started by" in ran.stdout
    assert "kill-to-replay latency min / median / p99 / max" in ran.stdout
    assert ran.json["rows"][0]["history"]


@pytest.fixture(scope="module")
def duplicates(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    args = ["--scenario", "duplicate-enqueue", "-s", "provider-key", "-s", "retry-only", "--ops", "20"]
    return run_testbed([*args, "--workers", "3"], tmp_path_factory.mktemp("duplicates"))


def test_duplicate_enqueue_one_effect_with_a_key_two_without(duplicates: Ran) -> None:
    assert duplicates.code == 0, duplicates.stdout + duplicates.stderr
    keyed = duplicates.row("provider-key", "before-effect")
    assert (keyed["effects"], keyed["duplicateEffects"], keyed["missingOperations"]) == (20, 0, 0)
    # The duplicate, racing the held request, is told 409 and then gets the replayed receipt.
    for op in ("tenant-demo:notification:10", "tenant-demo:notification:20"):
        contact = next(e for e in keyed["history"][op] if e["event"] == "contact" and e["attempt"] == 2)
        assert contact["answer"] == "409"
    assert keyed["requests"] >= 24
    keyless = duplicates.row("retry-only", "before-effect")
    assert (keyless["effects"], keyless["duplicateEffects"]) == (22, 2)


def test_remint_duplicates_even_with_a_key(workdir: Path) -> None:
    ran = run_testbed(["--scenario", "remint", "-s", "provider-key", "-b", "after-effect", "--ops", "20"], workdir)
    assert ran.code == 0, ran.stdout + ran.stderr
    row = ran.row("provider-key", "after-effect")
    assert (row["intended"], row["effects"], row["duplicateEffects"]) == (20, 22, 2)


def test_load_with_seeded_kills_keeps_each_strategys_promises(workdir: Path) -> None:
    args = ["--ops", "150", "--workers", "3", "--kill-rate", "0.2", "--seed", "7"]
    ran = run_testbed([*args, "-s", "provider-key", "-s", "record-before", "-s", "retry-only"], workdir, command="load")
    assert ran.code == 0, ran.stdout + ran.stderr
    rows = {r["strategy"]: r for r in ran.json["rows"]}
    assert all(r["verdict"] == "pass" and r["kills"] > 20 for r in rows.values())
    assert (rows["provider-key"]["duplicateEffects"], rows["provider-key"]["missingOperations"]) == (0, 0)
    assert rows["record-before"]["duplicateEffects"] == 0 and rows["record-before"]["missingOperations"] > 0
    assert rows["retry-only"]["missingOperations"] == 0 and rows["retry-only"]["duplicateEffects"] > 0
    assert "duplicateEffects = 0" in rows["provider-key"]["invariants"]
    # The same seed arms the same attempts for every strategy.
    assert len({r["kills"] for r in rows.values()}) == 1
    assert ran.json["options"]["peakRssMb"] > 0
    assert_left_nothing(ran)


RQ_TUNED = ["--worker-ttl", "20", "--maintenance-interval", "5", "--job-monitoring-interval", "5"]


@pytest.mark.slow
@pytest.mark.background("rq-recovery", "replay", "--ops", "5", "--every", "5", "--recovery", "rq", *RQ_TUNED)
def test_rq_recovers_an_abandoned_job_only_after_its_entry_expires(background_runs: BackgroundRuns) -> None:
    """Left to RQ (tuned), a dead worker's job comes back through RQ's own cleanup,
    after the started-registry entry expires: job-monitoring interval + 60 s.
    The run starts with the session: most of it is that wait."""
    ran = finish(*background_runs["rq-recovery"], timeout=240)
    assert ran.code == 0, ran.stdout + ran.stderr
    row = ran.json["rows"][0]
    assert (row["kills"], row["replays"], row["jobsFailed"], row["effects"]) == (1, 1, 0, 5)
    # The entry expires 65 s after the work-horse's last heartbeat, at its start, which
    # comes a little before its kill: the replay follows the kill by a little under 65 s
    # at the least (64.98 s once), or by up to a maintenance interval more.
    assert row["replayLatencyMs"]["min"] >= 64_000
    assert "recovered" not in [e["event"] for e in row["history"]["tenant-demo:notification:5"]]
