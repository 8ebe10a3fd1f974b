"""One timeline per cell: the model (events, local facts and the provider's effects in; rows,
bars, marks and spans out), its drawing, the provider log as the report reads it, and the
page of a long run (sampled, and saying so)."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest

from provider.contract import Contract
from provider.ledger import SendTicket
from provider.store import Store
from testbed.report import effects, html, page, plots, timelines
from testbed.report.effects import AtProvider, Effect, Ledger, ProviderSide
from testbed.report.timelines import CellFacts, cell_timeline, fate_of
from testbed.store import history
from testbed.store import results as stored
from testbed.store.formats import StoredEvent
from testbed.store.results import HeldOp
from tests.support.dom import parse
from tests.support.rows import row
from tests.unit.test_report_render import document_of

T = 1_796_000_000.0
OP = "tenant-demo:notification:5"
HELD = HeldOp(op=OP, state="unresolved", reason="the provider answered 410: withdrawn")


def local(op: str = OP, outcome: str | None = "completed", attempts: int = 2, **more: object) -> history.LocalFacts:
    fields = {"op": op, "attempts": attempts, "outcome": outcome, "detail": "", "jobFailed": False} | more
    return history.LocalFacts.model_validate_json(json.dumps(fields))


def typed(events: list[dict[str, Any]]) -> list[StoredEvent]:
    return [StoredEvent.model_validate(e) for e in events]


def start(t: float, attempt: int, worker: str, pid: int, enqueued: float | None = None) -> dict[str, Any]:
    return {"event": "attempt-start", "at": t, "attempt": attempt, "pid": pid, "worker": worker} | (
        {"enqueuedAt": enqueued} if enqueued is not None else {}
    )


def end(t: float, attempt: int, worker: str, pid: int, outcome: str = "completed") -> dict[str, Any]:
    return {"event": "attempt-end", "at": t, "attempt": attempt, "pid": pid, "worker": worker, "outcome": outcome}


def hit(t: float, boundary: str = "after-effect", fault: str = "kill", attempt: int = 1) -> dict[str, Any]:
    return {"event": "hit", "at": t, "attempt": attempt, "boundary": boundary, "fault": fault, "pid": 100}


def horse_killed_after_effect(t: float = T) -> list[StoredEvent]:
    """The effect applied, the work-horse killed before it heard; RQ's Retry runs it again."""
    return typed(
        [
            start(t, 1, "w1", 100, t - 0.1),
            hit(t + 0.010),
            {"event": "killed", "at": t + 0.011, "attempt": 1, "boundary": "after-effect", "worker": "w1"}
            | {"pids": [100], "confirmedMs": 1.5},
            start(t + 0.300, 2, "w2", 101, t + 0.020),
            {"event": "contact", "at": t + 0.310, "attempt": 2, "pid": 101, "worker": "w2", "answer": "201"},
            end(t + 0.320, 2, "w2", 101),
        ]
    )


def twice(t: float = T) -> AtProvider:
    return AtProvider(2, 0, 0, (Effect(t + 0.009, 1), Effect(t + 0.309, 2)))


def test_a_duplicated_op_shows_both_effects_the_hit_and_the_kill_apart() -> None:
    ledger = Ledger({OP: twice()})
    model = cell_timeline(CellFacts({OP: horse_killed_after_effect()}, [[local()]], ledger, "log"))
    (op,) = model.rows
    assert (op.op, op.outcome, op.judged and op.judged.word) == (OP, "duplicated", "duplicated: 2 effects")
    first, again = op.bars
    assert (first.attempt, first.how, first.worker, first.pid) == (1, "killed", "w1", 100)
    assert (again.attempt, again.how, again.outcome) == (2, "ended", "completed")
    assert "the provider answered 201" in again.detail()
    # 0 is the cell's start: the first attempt's enqueue, 100 ms before it started
    assert model.anchor.at == T - 0.1 and first.start == pytest.approx(100.0)
    marks = {m.kind: m for m in op.marks if m.kind != "effect"}
    # the fault's boundary and the kill: on tracks of their own, never drawn on one another
    assert (marks["hit"].track, marks["kill"].track, marks["kill"].bar) == ("lab", "attempt", 0)
    # the killed attempt's own effect, at the time the provider applied it, and the replay's
    applied = [m for m in op.marks if m.kind == "effect"]
    assert [(m.track, round(m.at, 1)) for m in applied] == [("provider", 109.0), ("provider", 409.0)]
    assert "by attempt 1's request" in applied[0].detail
    (queued,) = op.spans
    assert (queued.kind, queued.bar, round(queued.start, 1), round(queued.end or 0, 1)) == ("queued", 1, 120.0, 400.0)


def test_a_provider_crash_is_drawn_as_the_provider_killed_and_back() -> None:
    """The kill names the provider, not a worker (the report of a full matrix crashed on it)."""
    events = typed(
        [
            start(T, 1, "w1", 100, T - 0.05),
            hit(T + 0.010, fault="provider-crash"),
            {"event": "killed", "at": T + 0.012, "attempt": 1, "boundary": "after-effect", "provider": 4242}
            | {"confirmedMs": 2.0, "restartedMs": 180.0},
            end(T + 0.020, 1, "w1", 100, outcome="failed"),
            start(T + 0.250, 2, "w3", 102, T + 0.030),
            end(T + 0.260, 2, "w3", 102),
        ]
    )
    other = "tenant-demo:notification:10"
    shared = typed(
        [
            start(T + 0.001, 1, "w2", 110),
            hit(T + 0.011, fault="provider-crash"),
            {"event": "killed", "at": T + 0.013, "attempt": 1, "boundary": "after-effect", "provider": 4242}
            | {"shared": True},
        ]
    )
    ledger = Ledger({OP: twice()})
    model = cell_timeline(CellFacts({OP: events, other: shared}, [[local()], [local(other)]], ledger, "log"))
    crashed = next(r for r in model.rows if r.op == OP)
    (kill,) = [m for m in crashed.marks if m.kind == "provider-kill"]
    assert kill.track == "provider" and "pid 4242" in kill.detail and "SIGKILL" in kill.detail
    (down,) = [s for s in crashed.spans if s.kind == "provider-down"]
    assert down.track == "provider" and down.end == pytest.approx(down.start + 180.0)
    # the worker's attempt was not killed: it ends as it ended
    assert [b.how for b in crashed.bars] == ["ended", "ended"]
    died = next(r for r in model.rows if r.op == other)
    (with_it,) = [m for m in died.marks if m.kind == "provider-kill"]
    assert "in the crash of another op's request" in with_it.detail
    assert not [s for s in died.spans if s.kind == "provider-down"]
    assert died.outcome == "missing" and died.bars[0].how == "open"


def test_a_partition_cuts_the_host_off_until_it_heals_and_counts_come_from_the_audit() -> None:
    events = typed(
        [
            start(T, 1, "hostA/w1", 100, T - 0.05),
            hit(T + 0.010, fault="partition"),
            {"event": "partitioned", "at": T + 0.012, "attempt": 1, "boundary": "after-effect", "worker": "hostA/w1"}
            | {"host": "hostA", "confirmedMs": 3.0, "letGo": T + 0.013},
            {"event": "call-timeout", "at": T + 0.510, "attempt": 1, "pid": 100, "worker": "hostA/w1"},
            {"event": "healed", "at": T + 0.520, "attempt": 1, "host": "hostA", "confirmedMs": 2.0},
            end(T + 0.515, 1, "hostA/w1", 100, outcome="failed"),
            start(T + 0.600, 2, "hostB/w1", 200, T + 0.530),
            end(T + 0.610, 2, "hostB/w1", 200),
        ]
    )
    audit = ProviderSide("audit", {"l": Ledger({OP: AtProvider(2)}, complete=False)})
    model = cell_timeline(CellFacts({OP: events}, [[local()]], audit.ledger("l"), "audit"))
    (op,) = model.rows
    assert op.outcome == "duplicated" and model.provider == "audit"
    (cut,) = [s for s in op.spans if s.kind == "cut"]
    assert (cut.track, round(cut.start, 1), round(cut.end or 0, 1)) == ("attempt", 62.0, 570.0)
    assert "hostA, the host of hostA/w1, cut off from the provider" in cut.detail
    assert [m.kind for m in op.marks if m.track == "attempt"] == ["timeout"]
    assert not [m for m in op.marks if m.kind == "effect"]  # an audit keeps counts, no times
    # an op the audit did not answer for is not known, never taken as missing
    ledger, elsewhere = audit.ledger("l"), audit.ledger("elsewhere")
    assert ledger is not None and ledger.of("another op") is None
    assert elsewhere is not None and elsewhere.of(OP) is None


@pytest.mark.parametrize(
    ("at_provider", "facts", "held", "breach", "outcome", "word"),
    [
        ([AtProvider(2)], [local()], None, None, "duplicated", "duplicated: 2 effects"),
        ([AtProvider(0)], [local(outcome="skipped")], None, None, "missing", "missing, reported done"),
        ([AtProvider(0)], [local(outcome=None, jobFailed=True)], None, None, "missing", "missing"),
        ([AtProvider(1)], [local(outcome="unresolved")], HELD, None, "held", "held: unresolved"),
        ([AtProvider(0, declined=1)], [local(outcome="failed")], None, None, "declined", "failed by provider"),
        ([AtProvider(1)], [local()], None, None, "once", "exactly once"),
        ([None], [local()], None, "duplicated", "duplicated", "duplicated"),
        ([None], [local()], None, None, "unknown", "not known"),
        # a re-minted op's effect counts for its logical action
        (
            [AtProvider(1), AtProvider(1)],
            [local(), local(OP + ":r1")],
            None,
            None,
            "duplicated",
            "duplicated: 2 effects",
        ),
    ],
)
def test_what_became_of_an_op(
    at_provider: list[AtProvider | None],
    facts: list[history.LocalFacts],
    held: HeldOp | None,
    breach: str | None,
    outcome: str,
    word: str,
) -> None:
    judged = fate_of(at_provider, facts, held, breach)
    assert (judged.outcome, judged.word) == (outcome, word)


def test_bad_ops_first_at_most_n_rows_and_the_page_says_how_it_chose() -> None:
    events, intents, ops = {}, [], {}
    for n in range(1, 121):
        op = f"op-{n}"
        events[op] = typed([start(T + n, 1, "w1", n), hit(T + n + 0.01), end(T + n + 0.02, 1, "w1", n)])
        intents.append([local(op, attempts=1)])
        ops[op] = AtProvider(2 if n in (40, 80, 120) else 1)
    intents.append([local("op-121", outcome="skipped", attempts=1)])  # no fault struck it, yet it is lost
    model = cell_timeline(CellFacts(events, intents, Ledger(ops), "log"), limit=50)
    assert len(model.rows) == 50 and (model.candidates, model.bad, model.shown_bad) == (121, 4, 4)
    assert [r.op for r in model.rows[:4]] == ["op-40", "op-80", "op-120", "op-121"]
    assert model.rows[3].outcome == "missing" and not model.rows[3].bars
    others = [int(r.op.split("-")[1]) for r in model.rows[4:]]
    assert others == sorted(others) and others[0] == 1 and others[-1] > 110  # spread over the whole cell
    assert model.sampling() == (
        "50 of 121 ops shown: every bad op (4), then 46 of the 117 others, evenly spread in time order. "
        "The run's store holds every op's events (history.jsonl)."
    )
    assert model.tally == {"duplicated": 3, "missing": 1, "once": 117}
    small = cell_timeline(CellFacts({"op-1": events["op-1"]}, intents[:1], Ledger(ops), "log"))
    assert small.sampling() == ""
    as_many = cell_timeline(CellFacts(events, intents, Ledger(ops), "log"), limit=4)
    assert as_many.sampling().startswith("4 of 121 ops shown: its 4 bad ops, none of the 117 others.")


def test_an_effect_on_a_clock_the_scenario_moved_is_drawn_at_its_attempts_answer() -> None:
    """key-expired moves the ledger's clock a day on at each fault: the replay's effect is a day late."""
    moved = AtProvider(2, 0, 0, (Effect(T + 0.009, 1), Effect(T + 86_401 + 0.309, 2)))
    model = cell_timeline(CellFacts({OP: horse_killed_after_effect()}, [[local()]], Ledger({OP: moved}), "log"))
    first, late = [m for m in model.rows[0].marks if m.kind == "effect"]
    assert round(first.at, 1) == 109.0 and round(late.at, 1) == 410.0  # the replay's answer
    assert "on a clock the scenario had moved on" in late.detail
    assert model.end < 1000  # the axis is the cell's, not a day long


def test_a_duplicate_job_runs_beside_the_first_and_a_withdrawal_is_the_providers() -> None:
    events = typed(
        [
            start(T, 1, "w1", 100),
            hit(T + 0.010, "before-effect", "hold"),
            {"event": "nemesis", "at": T + 0.011, "action": "duplicate"},
            start(T + 0.015, 2, "w2", 101, T + 0.012),
            end(T + 0.030, 2, "w2", 101),
            end(T + 0.040, 1, "w1", 100),
            {"event": "nemesis", "at": T + 0.050, "action": "withdraw"},
        ]
    )
    (op,) = cell_timeline(CellFacts({OP: events}, [[local()]], Ledger({OP: twice()}), "log")).rows
    assert [(b.attempt, b.slot) for b in op.bars] == [(1, 0), (2, 1)] and op.slots == 2
    assert [(m.track, m.detail) for m in op.marks if m.kind == "nemesis"] == [
        ("lab", "the scenario: duplicate"),
        ("provider", "the scenario: withdraw"),  # it acts on the provider's effect, not on the queue
    ]
    logged = AtProvider(1, 1, 0, (Effect(T + 0.005, 1, T + 0.050),))
    (op,) = cell_timeline(CellFacts({OP: events}, [[local()]], Ledger({OP: logged}), "log")).rows
    assert [m.kind for m in op.marks if m.track == "provider"] == ["effect", "withdrawn"]  # the log's own time


def test_timeline_svg_keeps_marks_of_a_track_apart_and_text_out_of_the_plot() -> None:
    ledger = Ledger({OP: twice()})
    model = cell_timeline(CellFacts({OP: horse_killed_after_effect()}, [[local()]], ledger, "log"))
    dom = parse(plots.timeline_svg(model))
    (op_row,) = dom.find_all("g", "op-row")
    assert (op_row.attrs["data-op"], op_row.attrs["data-outcome"]) == (OP, "duplicated")
    assert [a.attrs["data-attempt"] for a in op_row.find_all("g", "attempt")] == ["1", "2"]
    # every text is left of the plot (the op's name and outcome) or below it (the axis)
    for t in dom.find_all("text"):
        assert float(t.attrs["x"]) < plots.GUTTER or "tick" in t.classes or "caption" in t.classes
    # marks of one track at nearly the same moment are moved apart, never drawn on one another
    crowded = timelines.op_row(OP, typed([hit(T + 0.0001 * k) for k in range(5)]), T, [], None)
    model.rows = [crowded]
    xs = [float(p.attrs["d"].split(",")[0][1:]) for p in parse(plots.timeline_svg(model)).find_all("path")]
    assert all(b - a >= plots.GAP - 0.1 for a, b in itertools.pairwise(xs))


def test_p99_only_from_enough_samples_and_its_label_on_the_plot() -> None:
    few = [(10.0, "a"), (400.0, "b")]
    dom = parse(plots.strip_plot([plots.Strip("s", "replay", few, {"min": 10, "median": 205, "p99": 400, "max": 400})]))
    assert [line.attrs["class"] for line in dom.find_all("line") if "stat" in line.classes] == [
        "stat median",
        "stat max",
    ]
    many = [(float(v), "v") for v in range(1, 101)]
    stats = {"min": 1.0, "median": 50.5, "p99": 99.0, "max": 100.0}
    dom = parse(plots.strip_plot([plots.Strip("s", "replay", many, stats)], width=1000))
    median, p99 = dom.find_all("text", "stat-label")
    assert p99.all_text() == "p99 99.0" and median.all_text() == "median 50.5"
    # at the right edge, its label ends within the plot, clear of the median's
    right = float(p99.attrs["x"]) + len(p99.all_text()) * plots.CHAR_W
    assert right <= 1000 and float(median.attrs["x"]) + len(median.all_text()) * plots.CHAR_W < float(p99.attrs["x"])


def test_the_report_reads_the_provider_log_read_only_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    store = Store(tmp_path / "provider.sqlite3")
    store.put_ledger("run.c001", Contract())
    for attempt in (1, 2):
        store.send(SendTicket("run.c001", OP, None, "fp", attempt), {"to": "x"})
    store.send(SendTicket("run.c001", "op-2", None, "fp", 1), {"to": "y"})
    store.close()
    for leftover in tmp_path.glob("provider.sqlite3-*"):
        leftover.unlink()  # as a stored run keeps it: the log alone
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    side = effects.read(tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing made beside it, nothing changed
    ledger = side.ledger("run.c001")
    assert side.source == "log" and ledger is not None
    found = ledger.of(OP)
    assert found is not None and found.effects == 2 and [e.attempt for e in found.times or ()] == [1, 2]
    assert ledger.of("never sent") == AtProvider(times=())  # the log is whole: absent means none
    os.chmod(tmp_path, 0o500)  # a stored run that cannot be written to still has its report
    try:
        assert effects.read(tmp_path).source == "log"
    finally:
        os.chmod(tmp_path, 0o700)
    assert effects.read(tmp_path / "elsewhere") == effects.NOTHING


def long_run(ops: int = 100_000, every: int = 10) -> tuple[stored.Results, list[history.Line], ProviderSide]:
    """A run of one cell of `ops` ops, every `every`-th killed after its effect and run again
    (duplicated), as a stored run holds it: results, history lines, the provider's log."""
    cell = {"type": "cell", "cell": "c001", "ledger": "run.c001", "strategy": "retry-only"}
    lines = [json.dumps(cell | {"boundary": "after-effect", "fault": "kill", "scenario": "none"})]
    # A facts line per op, as `history.facts_line` writes it (made from a template: 100,000 of them)
    facts = (
        '{"type":"facts","cell":"c001","intent":"%s","ops":[{"op":"%s","attempts":%d,"outcome":"completed",'
        '"detail":"","jobFailed":false}]}'
    )
    held: dict[str, AtProvider] = {}
    for n in range(1, ops + 1):
        op, t, faulted = f"tenant-demo:notification:{n}", T + n * 0.004, n % every == 0
        if faulted:
            lines += [
                json.dumps({"type": "event", "cell": "c001", "op": op} | e.as_dict())
                for e in horse_killed_after_effect(t)
            ]
            held[op] = twice(t)
        else:
            held[op] = AtProvider(1, 0, 0, (Effect(t + 0.002, 1),))
        lines.append(facts % (op, op, 1 + faulted))
    duplicated = ops // every
    doc = document_of(
        command="chaos",
        rows=[
            row("retry-only", "after-effect", intended=ops, effects=ops + duplicated, duplicateEffects=duplicated)
            | {"kills": duplicated, "faults": duplicated, "replays": duplicated, "cell": "c001"}
        ],
    )
    parsed = [history.parse_line(line) for line in lines]
    return stored.parse(doc), parsed, ProviderSide("log", {"run.c001": Ledger(held)})


def test_a_run_of_100000_ops_renders_sampled_and_says_so() -> None:
    with page.collector_paused():  # as `testbed report` reads and renders a stored run
        results, lines, provider = long_run()
        dom = parse(html.render(results, lines, provider))
    (figure,) = dom.find_all("figure", "cell-timeline")
    assert figure.attrs["data-ops"] == "10000" and figure.attrs["data-rows"] == str(timelines.ROWS)
    assert "open" in dom.one("details", "cell-timelines").attrs  # its bad ops: open with the page
    rows = figure.find_all("g", "op-row")
    assert len(rows) == timelines.ROWS and {r.attrs["data-outcome"] for r in rows} == {"duplicated"}
    said = " ".join(p.all_text() for p in figure.find_all("p"))
    shown = timelines.ROWS
    assert f"{shown} of 10000 ops shown: {shown} of its 10000 bad ops, evenly spread in time order" in said
    assert len(dom.find_all("details", "events-list")) == timelines.ROWS  # the events of the ops shown, not of all
    (plot,) = dom.find_all("figure", "latency-plot")
    strip = plot.one("g", "strip", data_kind="replay")
    assert strip.attrs["data-n"] == "10000" and len(strip.find_all("circle", "dot")) == plots.MAX_DOTS
    assert "A strip draws 1,000 of its values" in plot.all_text()


def test_a_page_from_a_stored_run_on_disk(tmp_path: Path) -> None:
    """What `testbed report` reads: no history line of a cell or a facts line is needed to draw it."""
    results, lines, _ = long_run(ops=20)
    events = [line for line in lines if isinstance(line, history.EventLine)]
    dom = parse(html.render(results, events, effects.read(tmp_path)))
    (figure,) = dom.find_all("figure", "cell-timeline")
    assert figure.attrs["data-provider"] == "none" and "kept no record of the provider" in figure.all_text()
    assert {r.attrs["data-outcome"] for r in figure.find_all("g", "op-row")} == {"unknown"}
