from testbed.judge import invariants
from testbed.judge.checker import Counts
from testbed.report import replays


def test_invariants_name_what_broke() -> None:
    assert invariants.broken("provider-key", Counts(intended=10, effects=10)) == []
    assert invariants.broken("provider-key", Counts(duplicate_effects=2)) == ["no effect twice: duplicateEffects = 2"]
    assert invariants.broken("record-before", Counts(missing_operations=3, false_completions=3)) == []
    assert invariants.broken("retry-only", Counts(missing_operations=1)) == ["no work lost: missingOperations = 1"]
    assert invariants.broken("fresh-key", Counts(jobs_failed=1)) == ["every job ends: jobsFailed = 1"]


def test_timeline_shows_killed_ops_only_in_time_order() -> None:
    history = {
        "op-1": [
            {"event": "attempt-start", "at": 10.0, "attempt": 1, "worker": "w1", "pid": 11},
            {"event": "attempt-end", "at": 10.5, "attempt": 2, "outcome": "completed", "detail": "eff_1"},
            {"event": "killed", "at": 10.01, "attempt": 1, "boundary": "after-effect", "worker": "w1"}
            | {"pids": [11], "confirmedMs": 1.5},
            {"event": "attempt-start", "at": 10.4, "attempt": 2, "worker": "w2", "pid": 12, "enqueuedAt": 10.02},
        ],
        "op-2": [{"event": "attempt-start", "at": 11.0, "attempt": 1, "worker": "w1", "pid": 13}],
    }
    text = replays.render(history)
    assert "op-2" not in text
    lines = text.splitlines()
    assert lines[0] == "op-1  (replayed 390.0 ms after the kill)"
    assert "killed at after-effect: work-horse of w1 (pid 11)" in lines[2]
    assert "attempt 2 started by w2 (pid 12), enqueued at +20.0 ms" in lines[3]
    assert lines[4].endswith("attempt 2 ended: completed (eff_1)")


def test_latency_summary() -> None:
    stats = {"min": 1.0, "median": 2.0, "p99": 3.0, "max": 4.0}
    assert replays.summary(stats, 4).endswith("1.0 / 2.0 / 3.0 / 4.0 ms")
    assert replays.summary(None, 0) == "0 kill(s), no replay observed"
