"""The observer: replay latency kept once, as a run goes and from a stored history."""

from labcore.events import Event, EventKind, Noted
from testbed.judge.observer import CellObservations, ReplayClock, parse_history, replay_latency


def start(op: str, attempt: int, ts: float) -> Event:
    return Event(EventKind.ATTEMPT_START, "c001", op, attempt, 100 + attempt, f"w{attempt}", ts)


def test_replay_clock_measures_kill_to_the_next_attempt_only() -> None:
    clock = ReplayClock()
    clock.killed("op", at=10.0, attempt=1)
    assert clock.started("op", at=10.2, attempt=1) is None  # the killed attempt itself
    assert clock.started("op", at=10.5, attempt=2) == 500.0
    assert clock.started("op", at=11.0, attempt=3) is None  # measured once


def test_observations_count_kills_and_latencies_and_keep_history() -> None:
    seen = CellObservations()
    seen.event(start("op", 1, 1.0))
    seen.note("op", EventKind.HIT, 1.01, attempt=1, boundary="after-effect", fault="kill", pid=101)
    seen.note("op", EventKind.KILLED, 1.02, attempt=1, boundary="after-effect", worker="w1", pids=[101])
    seen.event(start("op", 2, 1.12))
    assert (seen.faults, seen.kill_count) == (1, 1)
    assert [round(x, 1) for x in seen.replay_latencies_ms] == [100.0]
    kinds = [e["event"] for e in seen.history_json()["op"]]
    assert kinds == ["attempt-start", "hit", "killed", "attempt-start"]


def test_without_history_only_counts_are_kept() -> None:
    seen = CellObservations(keep_history=False)
    seen.note("op", EventKind.KILLED, 1.0, attempt=1)
    seen.event(start("op", 2, 1.5))
    assert seen.history == {} and seen.kill_count == 1 and list(seen.replay_latencies_ms) == [500.0]


def test_stored_history_gives_the_same_latency() -> None:
    seen = CellObservations()
    seen.event(start("op", 1, 5.0))
    seen.note("op", EventKind.KILLED, 5.1, attempt=1, boundary="before-effect", worker="w1", pids=[1])
    seen.event(start("op", 2, 5.35))
    stored = parse_history(seen.history_json())
    latency = replay_latency(stored["op"])
    assert latency is not None and latency.replay_ms == seen.replay_latencies_ms[0]
    assert replay_latency([Noted(EventKind.ATTEMPT_START, 1.0, {"attempt": 1})]) is None


def test_a_stored_history_replayed_gives_the_counts_the_run_had() -> None:
    stored: list[tuple[str, Noted]] = []
    seen = CellObservations(keep_history=False, sink=lambda op, entry: stored.append((op, entry)))
    seen.event(start("op", 1, 1.0))
    seen.note("op", EventKind.HIT, 1.01, attempt=1)
    seen.note("op", EventKind.KILLED, 1.02, attempt=1)
    seen.event(start("op", 2, 1.22))
    seen.anomaly("unplanned hit")
    live = (seen.faults, seen.kill_count, list(seen.replay_latencies_ms))
    again = CellObservations(keep_history=False)
    for op, entry in stored:
        if entry.kind is EventKind.ANOMALY:
            again.anomaly(entry.data["text"])
        else:
            again.add(op, entry)
    assert (again.faults, again.kill_count, list(again.replay_latencies_ms)) == live
    assert again.anomalies == ["unplanned hit"] and seen.history == {}
