"""testbed explore and chaos --schedule on the real stack: random crash schedules, the first
failure shrunk, confirmed and replayed; the model against every built-in; the worked example."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from labcore.boundaries import Boundary
from labcore.faults import Fault
from labcore.plan import Armed
from labcore.schedule import Schedule
from tests.support.dom import parse
from tests.support.helpers import (
    Ran,
    assert_left_nothing,
    descendants,
    finish,
    kill_part,
    run_testbed,
    start_testbed,
)

pytestmark = pytest.mark.e2e

ROOT = str(Path(__file__).resolve().parents[2])
BUILT_INS = ["retry-only", "record-after", "record-before", "provider-key", "reconcile", "naive-reconcile", "fresh-key"]


def explored(ran: Ran) -> dict[str, Any]:
    found: dict[str, Any] = ran.json["explore"]
    return found


def test_the_silent_loss_is_found_shrunk_confirmed_and_replayed(workdir: Path) -> None:
    store = workdir / "runs"
    ran = run_testbed(["-s", "record-before", "--seed", "1", "--store", str(store)], workdir, command="explore")
    assert ran.code == 1, ran.stderr
    found = explored(ran)["counterexample"]
    schedule = Schedule.from_json(found["schedule"])
    # The article's silent loss: one op, one kill before the request goes out, the marker read back as done.
    (strike,) = schedule.strikes
    assert len(schedule.ops) == 1 and strike.attempt == 1 and strike.fault is Fault.KILL
    assert strike.boundary in (Boundary.BEFORE_REQUEST, Boundary.BEFORE_EFFECT)
    assert (found["found"], found["reproduced"], found["runs"]) == ("breach", 3, 3)
    (words,) = found["words"]
    assert words.startswith(f"op 1: attempt 1 killed at {strike.boundary}; attempt 2 skipped: 0 effects")
    assert words.endswith("job finished: missing")
    assert "COUNTEREXAMPLE for record-before: it breaks the promise; smallest: 1 op, 1 fault" in ran.stdout
    assert "reproduced 3 of 3 fresh runs" in ran.stdout and "coverage (struck / armed" in ran.stdout
    saved = store / "latest" / "counterexample.json"
    assert Schedule.decode(saved.read_text()) == schedule
    assert f"testbed chaos --schedule {store}/" in found["replay"]
    assert_left_nothing(ran)

    for name in ("replay", "check", "report"):
        (workdir / name).mkdir()
    replay = run_testbed(["--schedule", str(saved), "-s", "record-before", "--no-store"], workdir / "replay")
    assert replay.code == 1, replay.stderr
    (row,) = replay.json["rows"]
    assert (row["boundary"], row["effects"], row["missingOperations"], row["falseCompletions"]) == ("schedule", 0, 1, 1)
    assert row["promise"]["missing"] == 1 and row["expected"]["missingOperations"] == 1  # as the model predicts
    assert words in replay.stdout

    check = run_testbed(["latest", "--store", str(store)], workdir / "check", command="check")
    assert check.code == 1 and "(the run said: fail)" in check.stdout
    page = run_testbed(["latest", "--store", str(store)], workdir / "report", command="report")
    assert page.code == 0 and 'id="coverage"' in Path(page.stdout.strip()).read_text()


def test_a_counterexample_that_does_not_reproduce_is_reported_unconfirmed(
    workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that breaks its promise on its first run only: the search finds the breach, no fresh
    run reproduces it, and explore says it is unconfirmed (exit 4), its schedule kept to replay."""
    monkeypatch.setenv("FIRST_RUN_DIR", str(tmp_path))
    store = workdir / "runs"
    args = ["--handler", "tests.support.userjobs:breaks_on_first_run", "--scenario", "none", "--ops", "1"]
    args += ["--retries", "1", "--parallel", "1", "--seed", "1", "--store", str(store)]
    args += ["--junit", str(workdir / "j.xml")]
    ran = run_testbed(args, workdir, command="explore")
    assert ran.code == 4, ran.stderr + ran.stdout
    found = explored(ran)["counterexample"]
    assert (found["found"], found["reproduced"], found["runs"], found["confirmed"]) == ("breach", 0, 3, False)
    assert "COUNTEREXAMPLE" not in ran.stdout
    assert "UNCONFIRMED for tests.support.userjobs:breaks_on_first_run: it broke the promise in one trial" in ran.stdout
    assert "in none of its 3 fresh runs (reproduced 0 of 3)" in ran.stdout
    saved = store / "latest" / "counterexample.json"
    assert Schedule.decode(saved.read_text()) == Schedule.from_json(found["schedule"])
    assert found["replay"].startswith(f"testbed chaos --schedule {store}/")
    assert 'type="unconfirmed"' in (workdir / "j.xml").read_text()
    assert_left_nothing(ran)

    for name in ("check", "report"):
        (workdir / name).mkdir()
    check = run_testbed(["latest", "--store", str(store)], workdir / "check", command="check")
    assert check.code == 4, check.stdout + check.stderr
    page = run_testbed(["latest", "--store", str(store)], workdir / "report", command="report")
    assert page.code == 0, page.stdout + page.stderr
    first = parse(Path(page.stdout.strip()).read_text()).find_all("section")[0]  # the page opens with it
    assert first.one("h2").all_text() == "Unconfirmed counterexample"
    assert first.one("p", "unconfirmed").all_text().startswith("UNCONFIRMED: not a counterexample until it reproduces")
    terminal = first.one("pre", "terminal")
    assert terminal.attrs["data-confirmed"] == "false" and terminal.all_text() in ran.stdout
    assert terminal.all_text().startswith("UNCONFIRMED for tests.support.userjobs:breaks_on_first_run")


def test_provider_key_keeps_exactly_once(workdir: Path) -> None:
    args = ["-s", "provider-key", "--search", "random", "--budget", "40", "--seed", "3", "--no-store"]
    ran = run_testbed(args, workdir, command="explore")
    assert ran.code == 0, ran.stderr + ran.stdout
    summary = explored(ran)
    assert (summary["trials"], summary["breaches"], summary["labFailures"]) == (40, 0, 0)
    assert "counterexample" not in summary and "its budget of 40 trials was spent" in ran.stdout
    assert {s["fault"] for s in summary["coverage"]} >= {"kill", "timeout", "kill-worker", "hold"}
    assert any(s["attempt"] >= 2 and s["struck"] for s in summary["coverage"])  # recovery attempts struck too
    # Nothing of Hypothesis's in the working directory (no .hypothesis/): nothing is kept.
    assert sorted(p.name for p in workdir.iterdir()) == ["results.json", "stderr.txt", "stdout.txt", "tmp"]


def test_check_of_a_model_only_search_exits_as_the_search_did(workdir: Path) -> None:
    """Breaches the model predicts fail their rows, but a --model-only search does not seek them."""
    store = workdir / "runs"
    args = ["-s", "provider-key", "--model-only", "--scenario", "key-expired", "--budget", "30", "--seed", "1"]
    ran = run_testbed([*args, "--store", str(store)], workdir, command="explore")
    assert ran.code == 0, ran.stderr + ran.stdout
    summary = explored(ran)
    assert summary["breaches"] > 0 and summary["labFailures"] == 0 and "counterexample" not in summary
    assert any(row["verdict"] == "fail" for row in ran.json["rows"])
    (workdir / "check").mkdir()
    check = run_testbed(["latest", "--store", str(store)], workdir / "check", command="check")
    assert check.code == 0, check.stdout + check.stderr
    assert_left_nothing(ran)


def test_provider_key_keeps_exactly_once_over_the_whole_bounded_space(workdir: Path) -> None:
    """Every schedule of up to two faults (1 957 of them under none and duplicate-enqueue, 3 retries):
    a sample run on the stack checks the model, which predicts the rest; no breach, no disagreement."""
    ran = run_testbed(["-s", "provider-key", "--seed", "1", "--no-store"], workdir, command="explore")
    assert ran.code == 0, ran.stderr + ran.stdout
    summary = explored(ran)
    bounded = summary["bounded"]
    assert (summary["search"], bounded["depth"], bounded["schedules"], bounded["tried"]) == ("smallest", 2, 1957, 1957)
    assert bounded["ran"] == bounded["sampled"] == summary["trials"] >= 12 and bounded["pruned"] == 0
    assert bounded["predicted"] == 1957 - bounded["ran"]
    assert (summary["breaches"], summary["labFailures"], summary["shrinking"]) == (0, 0, 0)
    assert "the bounded space was tried to its end, no random search past it" in ran.stdout
    assert "1957 of 1957 schedules of the bounded space (depth 2) tried" in ran.stdout
    # Each schedule run strikes as armed: the sample is of schedules whose every strike the model says strikes.
    assert all(s["struck"] == s["armed"] for s in summary["coverage"]), summary["coverage"]


def test_past_the_bound_the_search_goes_on_at_random_when_asked(workdir: Path) -> None:
    """A budget asks for more than the bounded space: its trials, then random ones for the rest."""
    args = ["-s", "provider-key", "--depth", "1", "--sample", "4", "--budget", "10", "--seed", "1", "--no-store"]
    ran = run_testbed(args, workdir, command="explore")
    assert ran.code == 0, ran.stderr + ran.stdout
    summary = explored(ran)
    bounded = summary["bounded"]
    # Depth 1: the base and one fault on one of 3 attempts (under none), the base and a hold (duplicate-enqueue).
    assert bounded["schedules"] == bounded["tried"] == (1 + 3 * 17) + (1 + 1)
    assert 4 <= bounded["ran"] < summary["trials"] == 10
    assert "then at random past the bound, until its budget of 10 trials was spent" in ran.stdout
    assert "[enumerate]" in ran.stderr and "[search   ]" in ran.stderr


def test_the_worked_example_is_found_smallest_first_and_confirmed(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples.lookup_once: two kills on one op, the second on the recovery attempt after its
    effect; enumerated smallest first, so found with nothing to shrink, schedules its attempts
    never reach pruned."""
    monkeypatch.setenv("EXAMPLES_DB", str(workdir / "jobs.sqlite3"))
    args = ["--handler", "examples.lookup_once:send", "--path", ROOT, "--seed", "2", "--no-store"]
    ran = run_testbed(args, workdir, command="explore")
    assert ran.code == 1, ran.stderr + ran.stdout
    summary = explored(ran)
    found = summary["counterexample"]
    strikes = (Armed(1, Boundary.BEFORE_REQUEST, Fault.KILL), Armed(2, Boundary.AFTER_EFFECT, Fault.KILL))
    assert Schedule.from_json(found["schedule"]).ops == (strikes,)
    assert (found["found"], found["reproduced"], found["runs"]) == ("breach", 3, 3)
    assert summary["shrinking"] == 0 and summary["trials"] == summary["searched"] + 3
    bounded = summary["bounded"]
    assert bounded["pruned"] > 0 and bounded["ran"] == summary["searched"] and bounded["tried"] < bounded["schedules"]
    assert "a failure was found in the bounded space, smallest first (nothing to shrink)" in ran.stdout
    assert "[enumerate]" in ran.stderr and "[shrink" not in ran.stderr
    (words,) = found["words"]
    assert words.endswith("2 effects from 2 requests, job finished: duplicated"), words
    assert_left_nothing(ran)


def test_a_lab_failure_during_the_enumeration_exits_3_with_the_trials_judged(workdir: Path) -> None:
    """The provider dies while the bounded space is enumerated: exit 3, one line naming it, and
    the trials judged before kept (the run incomplete)."""
    args = ["-s", "provider-key", "--sample", "400", "--parallel", "1", "--seed", "1"]
    proc, _, err = start_testbed([*args, "--no-store"], workdir, command="explore")
    seen: set[tuple[int, float]] = set()
    deadline = time.monotonic() + 120
    while "[enumerate]" not in err.read_text():
        seen |= descendants(proc.pid)
        assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
        time.sleep(0.05)
    pid = kill_part(seen | descendants(proc.pid), "-m provider")
    ran = finish(proc, workdir, 60, seen=seen)
    assert ran.code == 3, ran.stderr + ran.stdout
    last = ran.stderr.strip().splitlines()[-1]
    assert last.startswith("testbed: error: ") and f"the provider (pid {pid}) died during the run" in last
    assert "Traceback" not in ran.stderr
    results = ran.json
    assert results["incomplete"] is True and "the provider" in results["failure"]
    assert len(results["rows"]) >= 1  # the trials judged before it
    assert_left_nothing(ran)


def test_an_interrupted_search_says_the_breach_it_had_found(workdir: Path) -> None:
    """Ctrl-C once a trial broke the promise, while it is shrunk or confirmed: exit 130, nothing
    kept, but the breach and its schedule said first."""
    proc, _, err = start_testbed(["-s", "record-before", "--seed", "1", "--no-store"], workdir, command="explore")
    deadline = time.monotonic() + 120
    while " breach " not in err.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    ran = finish(proc, workdir, 60)
    assert ran.code == 130, ran.stdout + ran.stderr
    assert ran.stderr.endswith("testbed: error: interrupted; everything the run started has been stopped\n")
    head, schedule = ran.stdout.split("its schedule, to replay with testbed chaos --schedule FILE:\n")
    assert "broke the promise: record-before @ schedule" in head and "job finished: missing" in head, head
    assert Schedule.decode(schedule).strikes
    assert ran.results is None and not (workdir / "runs").exists() and not (workdir / ".hypothesis").exists()
    assert_left_nothing(ran)


def test_held_ops_never_take_every_worker(workdir: Path) -> None:
    """A hold keeps its worker until the op's duplicate runs: trials that held an op on every
    worker at once stalled until the hold gave up, and read as a failure of the lab."""
    args = [a for s in ("provider-key", "retry-only", "record-after", "record-before") for a in ("-s", s)]
    args += ["--scenario", "duplicate-enqueue", "--workers", "2", "--model-only", "--seed", "7", "--no-store"]
    args += ["--search", "random"]
    ran = run_testbed([*args, "--budget", "300"], workdir, command="explore")
    assert ran.code == 0, ran.stderr + ran.stdout
    summary = explored(ran)
    # Two workers, at most one op held at once: 4 built-ins x 9 trials of 1 to 3 ops, each run once.
    assert (summary["trials"], summary["labFailures"]) == (36, 0), summary
    assert "no new trial was left to try" in ran.stdout
    assert any(s["fault"] == "hold" and s["struck"] for s in summary["coverage"])


def test_on_celery_early_ack_loses_the_killed_op_and_the_schedule_replays_it(workdir: Path) -> None:
    """Acknowledged as it starts, a task whose pool child is killed is never run again: the
    search finds the loss (as the model predicts it), and the schedule replays on the same setting."""
    pytest.importorskip("celery")
    store = workdir / "runs"
    celery = ["--engine", "celery", "--delivery", "early-ack"]
    args = ["-s", "provider-key", *celery, "--ops", "1", "--retries", "1", "--scenario", "none", "--parallel", "2"]
    ran = run_testbed(
        [*args, "--budget", "4", "--confirm", "1", "--seed", "1", "--store", str(store)], workdir, command="explore"
    )
    assert ran.code == 1, ran.stderr
    found = explored(ran)["counterexample"]
    (strike,) = Schedule.from_json(found["schedule"]).strikes
    assert (found["found"], strike.attempt, strike.fault) == ("breach", 1, Fault.KILL)
    (words,) = found["words"]
    assert words.endswith("0 effects from 0 requests, job failed: missing"), words
    assert found["replay"].endswith("-s provider-key --engine celery --delivery early-ack")
    assert ran.json["options"]["delivery"] == "early-ack"
    assert_left_nothing(ran)

    (workdir / "replay").mkdir()
    saved = str(store / "latest" / "counterexample.json")
    replay = run_testbed(["--schedule", saved, "-s", "provider-key", *celery, "--no-store"], workdir / "replay")
    assert replay.code == 1, replay.stderr
    (row,) = replay.json["rows"]
    assert (row["delivery"], row["missingOperations"], row["expected"]["missingOperations"]) == ("early-ack", 1, 1)


@pytest.mark.slow
def test_the_model_predicts_every_trial_of_every_built_in(workdir: Path) -> None:
    """The whole bounded space of every built-in: the model predicts every schedule, and a sample of
    each (with each scenario's first breach) run on the stack agrees with it."""
    args = [a for s in BUILT_INS for a in ("-s", s)]
    args += ["--model-only", "--sample", "8", "--seed", "5", "--no-store"]
    ran = run_testbed(args, workdir, timeout=600, command="explore")
    assert ran.code == 0, ran.stderr + ran.stdout
    summary = explored(ran)
    bounded = summary["bounded"]
    assert summary["labFailures"] == 0 and bounded["tried"] == bounded["schedules"] == 7 * 1957
    assert summary["trials"] == bounded["ran"] >= 7 * 8
    # The built-ins' own losses and duplicates are there, predicted: not what this search looks for.
    assert summary["breaches"] > 0
    assert {row["strategy"] for row in ran.json["rows"]} == set(BUILT_INS)


@pytest.mark.slow
def test_the_worked_example_passes_the_full_matrix(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXAMPLES_DB", str(workdir / "jobs.sqlite3"))
    args = ["--matrix", "full", "--handler", "examples.lookup_once:send", "--path", ROOT, "--ops", "10", "--every", "5"]
    ran = run_testbed([*args, "--no-store"], workdir, timeout=600)
    assert ran.code == 0, ran.stdout
    assert len(ran.json["rows"]) == 19


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "explore needs -s STRATEGY or --handler MODULE:FUNCTION"),
        (["-s", "reconcile", "--ops", "11"], "--ops must be from 1 to 10 (got 11)"),
        (["-s", "reconcile", "--retries", "0"], "--retries must be from 1 to 10 (got 0)"),
        (["-s", "reconcile", "--search", "fast"], "--search 'fast': choose smallest or random"),
        (["-s", "reconcile", "--depth", "5"], "--depth must be from 1 to 4 (got 5)"),
        (["-s", "reconcile", "--time", "soon"], "--time 'soon': expected a duration such as 90s, 5m or 1h"),
        (["-s", "reconcile", "--scenario", "sunny"], "unknown scenario 'sunny'"),
        (["--handler", "examples.naive:send", "--model-only"], "--model-only checks the model of the built-in"),
        (["-s", "reconcile", "--hosts", "--provider-url", "ftp://x"], "--provider-url must be an http(s) URL"),
        (["-s", "reconcile", "--engine", "celery"], "explore searches under one Celery delivery setting at a time"),
        (
            ["-s", "reconcile", "--engine", "celery", "--delivery", "autoretry", "--scenario", "duplicate-enqueue"],
            "scenario duplicate-enqueue under autoretry: a worker holding an op takes the next message",
        ),
    ],
)
def test_bad_explore_input_exits_2_with_one_line(workdir: Path, args: list[str], message: str) -> None:
    ran = run_testbed(args, workdir, timeout=60, command="explore")
    assert ran.code == 2
    (line,) = ran.stderr.strip().splitlines()
    assert line.startswith("testbed: error:") and message in line, line
    assert_left_nothing(ran)


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        ("{", ["-s", "reconcile"], "not JSON"),
        (json.dumps({"ops": [{"faults": [{"attempt": 1, "boundary": "job-start", "fault": "late"}]}]}),
         ["-s", "reconcile"], "op 1, attempt 1: late cannot strike at job-start"),
        (json.dumps({"scenario": "duplicate-enqueue", "ops": [{}]}), ["-s", "reconcile", "-b", "after-effect"],
         "--schedule says where faults strike and the scenario: not with -b, -f or --scenario"),
        (json.dumps({"ops": [{}]}), [], "--schedule runs for each -s STRATEGY and --handler given"),
        (json.dumps({"ops": [{"faults": [{"attempt": 1, "boundary": "before-effect", "fault": "hold"}]}]}),
         ["-s", "reconcile"], "op 1: the hold fault is duplicate-enqueue's"),
    ],
)  # fmt: skip
def test_a_bad_schedule_file_exits_2_with_one_line(workdir: Path, content: str, args: list[str], message: str) -> None:
    path = workdir / "schedule.json"
    path.write_text(content)
    ran = run_testbed(["--schedule", str(path), *args], workdir, timeout=60)
    assert ran.code == 2
    (line,) = ran.stderr.strip().splitlines()
    assert line.startswith("testbed: error:") and message in line, line
    assert ran.results is None
    assert_left_nothing(ran)
