"""report.html: one self-contained page for a stored run (pure).

Everything on the page is computed here, from the results document (and the
run's event stream, if given): no script, no network, no fonts or styles
from elsewhere. Sections and their parts carry stable ids, classes and
data-attributes, so a test (or a reader's browser tools) can find them:

- `#run`: the run's metadata;
- `#heatmaps`: per fault and scenario, and on Celery per delivery setting
  (`.group[data-fault][data-scenario][data-delivery]`), a heatmap of strategy
  x boundary (`td.cell[data-strategy][data-boundary]`, classes `outcome-*` and
  `verdict-*`) and the article's text table;
- `#failures`: every cell that differs (`.failure[data-cell]`), its
  differences and, where recorded, its ops (`.op-difference[data-op]`);
- `#latency`: replay latency per recovery mode (`figure.latency-plot[data-mode]`);
- `#load` (load runs): throughput, kills and effects over time
  (`figure.load-plot[data-metric]`), drawn from the rows' `series`;
- `#destination` (runs against a real destination): per cell, what the lab forwarded
  against what the destination holds, op by op (`testbed.report.destination`);
- `#timelines`: one timeline per cell (`figure.cell-timeline[data-cell]`), a row per
  faulted op (`g.op-row[data-op][data-outcome]`), and each op's events below it.

An exploration's page is about its counterexample (`testbed.report.explore`): `#counterexample`
first (as the terminal printed it, `pre.terminal[data-confirmed]`, and its timeline), `#coverage`,
`#trials` by phase (`details.phase[data-phase]`, `tr.trial[data-cell]`), the summary, the findings
(`div.counterexample` once, `ul.way-there` for the other failing trials), then the run, the
latency and the other trials' timelines, in folds by phase; no heatmap of cells (trials are no matrix).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from labcore.scoped import user_op_id
from testbed.judge.checker import OUTCOME_WORDS
from testbed.judge.scorecard import latency_stats
from testbed.report import destination, explore, findings, reading, timelines
from testbed.report.effects import NOTHING, ProviderSide
from testbed.report.latency import recovery_mode, replay_latency
from testbed.report.plots import MAX_DOTS, P99_FROM, Line, Strip, line_chart, strip_plot, timeline_legend, timeline_svg
from testbed.report.style import CSS
from testbed.report.svg import el, esc
from testbed.report.tables import (
    grid_text,
    grid_title,
    grids,
    left_said,
    legend,
    load_grid,
    stored_cell_text,
    stored_row_key,
)
from testbed.report.timelines import Anchor, CellTimeline, op_timeline
from testbed.store.formats import StoredEvent
from testbed.store.history import Line as HistoryLine
from testbed.store.results import OpDifference, ResultRow, Results

DASH = "\u2013"  # an absent value
OPEN_CELLS, OPEN_ROWS = 3, 60  # timelines open with the page besides the failing cells': so many, so many rows


def render(
    results: Results,
    history: Iterable[HistoryLine] | None = None,
    provider: ProviderSide = NOTHING,
    *,
    max_rows_per_cell: int = timelines.ROWS,
    at_destination: destination.Ledgers | None = None,
) -> str:
    """The page for a run's results; `history` is the run's event stream (see `document`),
    `provider` what the run kept of the provider's side (`effects.read`), `at_destination`
    a real destination's two sides (`destination.read`)."""
    rows = results.rows
    lines = None if history is None else list(history)  # read by the timelines too
    per_row = reading.histories(results, lines)
    facts = _cell_facts(results, per_row, lines, provider)
    load = reading.is_load(results)
    title = f"testbed {reading.command(results)} {results.run}".strip()
    if results.command == "explore" or results.explore is not None:
        return _page(title, _exploration(results, per_row, facts, max_rows_per_cell))
    # From the overview to the detail: the cells, what differs, how fast jobs came back, then every op.
    sections = [
        _run_section(results, load),
        _summary_section(findings.summary(rows)),
        _heatmap_section(rows, per_row),
        _findings_section(rows, per_row),
        _latency_section(results, rows, per_row),
        *([_load_section(rows)] if load else []),
        *([_destination_section(results, lines, at_destination)] if at_destination is not None else []),
        _timelines_section(rows, facts, max_rows_per_cell, _by_group),
    ]
    return _page(title, sections)


def _destination_section(
    results: Results, lines: list[HistoryLine] | None, found: destination.Ledgers
) -> tuple[str, str, str]:
    ledgers = [judged.ledger for judged in reading.cell_streams(results, lines)]
    return destination.section(results.rows, ledgers, found)


def _exploration(
    results: Results, per_row: list[reading.History], facts: list[timelines.CellFacts], limit: int
) -> list[tuple[str, str, str]]:
    """An exploration's page is about its counterexample: it first, as the terminal printed it, with
    its timeline; then what the search covered, its trials by phase, the findings (the counterexample
    once, the other failing trials as the way to it), and the detail."""
    rows = results.rows
    models = [timelines.cell_timeline(f, limit) for f in facts]
    at = explore.counterexample_index(results)
    links = {i: f"#cell-{i}" for i, m in enumerate(models) if m.rows} | ({} if at is None else {at: "#counterexample"})
    timeline = ""
    if at is not None and models[at].rows:
        timeline = _timeline_figure(at, reading.label(rows[at]), models[at], rows[at], opened=True)
    phase = {i: name for name, members in explore.trial_phases(results) for i in members}

    def by_phase(i: int, row: ResultRow) -> tuple[str, dict[str, object]]:
        return phase.get(i, ""), {"data_phase": phase.get(i, "")}

    return [
        explore.counterexample_section(results, per_row[at] if at is not None else {}, timeline),
        *filter(None, [explore.coverage_section(results)]),
        explore.trials_section(results, links),
        _summary_section(explore.summary_sentences(results)),
        _exploration_findings(results, per_row, links),
        _run_section(results, load=False),
        _latency_section(results, rows, per_row),
        _timelines_section(rows, facts, limit, by_phase, shown=() if at is None else (at,), models=models),
    ]


def _page(title: str, sections: list[tuple[str, str, str]]) -> str:
    nav = "".join(el("a", esc(name), href=f"#{sid}") for sid, name, _ in sections)
    body = el("header", el("h1", esc(title)) + el("nav", nav))
    body += "".join(el("section", f"<h2>{esc(name)}</h2>{html}", id=sid) for sid, name, html in sections)
    head = f'<meta charset="utf-8"><title>{esc(title)}</title><style>{CSS}</style>'
    return f'<!DOCTYPE html>\n<html lang="en"><head>{head}</head><body>{el("main", body)}</body></html>\n'


def _note(content: str) -> str:
    return el("p", esc(content), class_="note")


# ---------------------------------------------------------------- run


def _run_section(results: Results, load: bool) -> tuple[str, str, str]:
    rows = results.rows
    passed = sum(r.passed for r in rows)
    verdict = results.verdict
    badge = el("span", esc(verdict), class_=f"badge verdict-{verdict}", id="run-verdict")
    facts = [
        *([("command", reading.command(results))] if results.command or load else []),
        ("run", results.run),
        ("started", results.started_at),
        ("wall", f"{results.wall_seconds} s"),
        ("seed", results.seed),
        ("cells", f"{passed}/{len(rows)} as expected"),
    ]
    summary = el("dl", "".join(el("dt", esc(k)) + el("dd", esc(v)) for k, v in facts), class_="facts")
    meta = {
        "options": results.options.as_stored(),
        "versions": results.versions,
        "machine": results.machine.model_dump(by_alias=True),
    }
    details = "".join(
        el("details", el("summary", esc(name)) + _kv_table(_flat(values)), class_="meta")
        for name, values in meta.items()
    )
    return "run", "Run", el("div", badge + summary, class_="run-head") + details


def _flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = ", ".join(map(str, value)) if isinstance(value, list) else value
    return out


def _kv_table(values: Mapping[str, Any]) -> str:
    lines = "".join(el("tr", el("th", esc(k)) + el("td", esc(v))) for k, v in values.items())
    return el("table", lines, class_="kv")


# ---------------------------------------------------------------- heatmaps


def outcome(row: ResultRow) -> str:
    """What a cell shows, for its colour: clean, duplicates, missing, both, or ops held unresolved."""
    dup, missing = row.duplicate_effects > 0, row.missing_operations > 0
    if dup and missing:
        return "both"
    if dup or missing:
        return "duplicates" if dup else "missing"
    held = row.unresolved + row.conflicts + row.failed_by_provider
    return "held" if held else "clean"


def _heatmap_section(rows: Sequence[ResultRow], per_row: list[reading.History]) -> tuple[str, str, str]:
    if not rows:
        return "heatmaps", "Cells", _note("This run has no cells.")
    groups = []
    for g, grid in enumerate(grids(list(enumerate(rows)), lambda item: stored_row_key(item[1]))):
        head = el("tr", el("th", "strategy") + "".join(el("th", esc(c), scope="col") for c in grid.columns))
        lines = [head]
        for strategy in grid.strategies:
            cells = [el("th", esc(strategy), scope="row")]
            for column in grid.columns:
                found = grid.at(strategy, column)
                if found is None:
                    cells.append(el("td", DASH, class_="absent"))
                    continue
                i, row = found
                cells.append(_heat_cell(row, i, g, bool(_faulted_ops(per_row[i]))))
            lines.append(el("tr", "".join(cells)))
        caption = el("caption", "effects / missing / duplicates")
        heatmap = el("table", caption + "".join(lines), class_="heatmap")
        table = el("pre", esc(grid_text(grid, lambda item: stored_cell_text(item[1]))), class_="text-table")
        body = el("h3", esc(grid.title)) + el("div", heatmap + table, class_="group-body")
        gid = "-".join(filter(None, ("group", grid.delivery, grid.fault, grid.scenario)))
        groups.append(
            el(
                "div",
                body,
                class_="group",
                id=gid,
                data_fault=grid.fault,
                data_scenario=grid.scenario,
                data_delivery=grid.delivery or None,
            )
        )
    chips = el(
        "div",
        "".join(el("span", esc(t), class_=f"chip outcome-{c}") for c, t in _OUTCOMES)
        + el("span", "differs from expectation", class_="chip verdict-fail"),
        class_="heat-legend",
    )
    marks = legend(stored_cell_text(r) for r in rows)
    intro = _note(
        "Each cell: effects / missing / duplicates. Text tables: effects / missing" + (f"; {marks}." if marks else ".")
    )
    return "heatmaps", "Cells", intro + chips + "".join(groups)


_OUTCOMES = (
    ("clean", OUTCOME_WORDS["once"]),
    ("duplicates", "duplicates"),
    ("missing", "missing"),
    ("both", "duplicates and missing"),
    ("held", "held / conflicts / failed by provider"),
)


def _heat_cell(row: ResultRow, i: int, group: int, timelines: bool) -> str:
    """Row i's cell in heatmap `group` (a control is in every heatmap of its scenario)."""
    numbers = f"{row.effects} / {row.missing_operations} / {row.duplicate_effects}"
    held = ((row.unresolved, "u"), (row.conflicts, "c"), (row.failed_by_provider, "f"))
    marks = [f"{n}{m}" for n, m in (*held, (row.leftover_processes, "l")) if n]
    body = el("span", esc(numbers), class_="nums")
    if marks:
        body += el("span", esc(" ".join(marks)), class_="marks")
    verdict = row.verdict
    found = findings.cell_findings(row)
    if verdict == "fail":
        body = el("a", body + el("span", "differs", class_="differs"), href=f"#failure-{i}")
    else:
        if found.outcome != "exactly once":  # a pass is not "safe": the expectation allowed this
            body += el("span", "expected", class_="expected")
        if found.ops:
            body = el("a", body, href=f"#failure-{i}")
        elif timelines:
            body = el("a", body, href=f"#cell-{i}")
    label = found.label
    tooltip = f"{label}: {row.effects} effects, {row.missing_operations} missing, "
    tooltip += f"{row.duplicate_effects} duplicates, {row.kills} kills; {found.verdict}"
    if row.leftover_processes:
        tooltip += f"; {left_said(row.leftover_processes)}"
    return el(
        "td",
        body,
        id=f"heat-{group}-{i}",
        class_=f"cell outcome-{outcome(row)} verdict-{verdict}",
        title=tooltip,
        data_cell=label,
        data_strategy=row.strategy,
        data_boundary=row.boundary,
        data_fault=row.fault,
        data_scenario=row.scenario,
        data_delivery=row.delivery,
        data_verdict=verdict,
        data_effects=row.effects,
        data_missing=row.missing_operations,
        data_duplicates=row.duplicate_effects,
        data_leftovers=row.leftover_processes,
    )


# ---------------------------------------------------------------- summary


def _summary_section(sentences: Sequence[str]) -> tuple[str, str, str]:
    if not sentences:
        return "summary", "Summary", _note("This run has no cells.")
    items = "".join(el("li", esc(s)) for s in sentences)
    return "summary", "Summary", el("ul", items, class_="summary")


# ---------------------------------------------------------------- findings


def _findings_section(rows: Sequence[ResultRow], per_row: list[reading.History]) -> tuple[str, str, str]:
    """Every cell that differs, then every passing cell that names ops (held ones): the same
    cells and ops, in the same words, as the terminal, `testbed check` and JUnit."""
    named = [(i, r, findings.cell_findings(r)) for i, r in enumerate(rows)]
    named = [(i, r, f) for i, r, f in named if f.worth_naming]
    named.sort(key=lambda item: item[1].passed)  # the cells that differ first
    failing = sum(not r.passed for _, r, _ in named)
    if not named:
        return "failures", "Findings", _note("Every cell shows what its expectation predicts, and no op is held.")
    title = f"Findings ({failing} differ{'s' * (failing == 1)})" if failing else "Findings"
    return "failures", title, "".join(_finding(i, r, f, per_row[i]) for i, r, f in named)


def _exploration_findings(
    results: Results, per_row: list[reading.History], links: Mapping[int, str]
) -> tuple[str, str, str]:
    """The counterexample's trial once, the other failing trials as the way to it; then any passing
    trial that names ops. Without a counterexample, every trial that differs, as a run's cells."""
    rows = results.rows
    at = explore.counterexample_index(results)
    if at is None:
        return _findings_section(rows, per_row)
    found = findings.cell_findings(rows[at])
    body = _finding(at, rows[at], found, per_row[at], role="counterexample")
    body += explore.way_there(results, links)
    others = [(i, r, findings.cell_findings(r)) for i, r in enumerate(rows) if r.passed]
    body += "".join(_finding(i, r, f, per_row[i]) for i, r, f in others if f.worth_naming)
    failing = sum(not r.passed for r in rows) - 1
    return "failures", f"Findings (the counterexample, {failing} other failing trial{'s' * (failing != 1)})", body


def _finding(
    i: int, row: ResultRow, found: findings.CellFindings, history: reading.History, role: str | None = None
) -> str:
    heading = f"{role.capitalize()}: {found.label}" if role else found.label
    body = el("h3", esc(heading)) + el("p", esc(found.verdict), class_="verdict-words")
    if found.problems:
        body += el("ul", "".join(el("li", esc(d)) for d in found.problems), class_="differences")
    expected = row.expected
    if expected and not row.passed:
        counts = row.counts()
        observed = {k: counts.get(k) for k in expected}
        differing = [k for k in expected if expected[k] != observed[k]]
        if differing:
            body += _compare_table({k: expected[k] for k in differing}, {k: observed[k] for k in differing}, "fields")
        every = el("summary", "every counted field") + _compare_table(expected, observed, "expected-observed")
        body += el("details", every, class_="all-fields")
    if found.ops:
        lines = "".join(
            el("li", esc(op.text), class_=f"op op-{op.kind}", data_op=op.op, data_kind=op.kind) for op in found.ops
        )
        body += el("ul", lines, class_="ops")
    body += "".join(_op_difference(i, j, op) for j, op in enumerate(row.op_differences or []))
    if not found.ops and _faulted_ops(history):
        body += el("p", f'Its faulted ops are under <a href="#cell-{i}">timelines</a>.', class_="note")
    kind = " ".join(filter(None, ["failure" if not row.passed else "finding", role]))
    return el("div", body, class_=kind, id=f"failure-{i}", data_cell=found.label, data_ops=len(found.ops))


def _compare_table(expected: Mapping[str, Any], observed: Mapping[str, Any], cls: str) -> str:
    lines = [el("tr", "<th></th><th>expected</th><th>observed</th>")]
    for key in dict.fromkeys([*expected, *observed]):
        e, o = expected.get(key, DASH), observed.get(key, DASH)
        lines.append(
            el("tr", el("th", esc(key)) + el("td", esc(e)) + el("td", esc(o)), class_="differs" if e != o else None)
        )
    return el("table", "".join(lines), class_=f"compare {cls}")


def _op_difference(i: int, j: int, op: OpDifference) -> str:
    name = op.op
    steps = "".join(el("li", esc(_plan_step(p.model_dump()))) for p in op.plan)
    body = el("h4", esc(name)) + (el("ol", steps, class_="plan") if op.plan else "")
    body += _compare_table(op.expected, op.observed, "op-facts")
    events = list(op.events)
    if events:
        model = op_timeline(events)
        body += el("div", timeline_svg(model), class_="plot") + _events_table(events, model.anchor)
    return el("div", body, class_="op-difference", id=f"opdiff-{i}-{j}", data_op=name)


def _plan_step(step: object) -> str:
    if isinstance(step, Mapping):
        return ", ".join(f"{k} {v}" for k, v in step.items())
    return str(step)


# ---------------------------------------------------------------- timelines


def _faulted_ops(history: reading.History) -> list[tuple[str, list[StoredEvent]]]:
    return [(op, events) for op, events in history.items() if events and reading.faulted(events)]


def _cell_facts(
    results: Results, per_row: list[reading.History], lines: list[HistoryLine] | None, provider: ProviderSide
) -> list[timelines.CellFacts]:
    """What the page knows of each row's cell, for its timeline."""
    out = []
    for row, history, judged in zip(results.rows, per_row, reading.cell_streams(results, lines), strict=True):
        out.append(
            timelines.CellFacts(
                history,
                judged.intents,
                provider.ledger(judged.ledger),
                provider.source if judged.ledger is not None else "none",
                row.held,
                _breaking(row, judged.ledger),
                [d.op for d in row.op_differences or ()],
            )
        )
    return out


def _breaking(row: ResultRow, ledger: str | None) -> dict[str, str]:
    """A user's job's breaking ops, by the op's reference (the job was given it under its ledger)."""
    given = user_op_id(ledger, "") if ledger is not None else ""
    return {b.op.removeprefix(given): b.breach for b in row.promise.ops} if row.promise else {}


_PROVIDER_NOTES = {
    "audit": "The run kept the provider's counts, not its times (a provider the run did not start keeps its log"
    " on its host): outcomes are from its audit, and its effects are not drawn.",
    "none": "The run kept no record of the provider's side: its effects are not drawn, and outcomes are"
    " known only where the run's verdict names them.",
}


# A cell's fold among the timelines: its title and the fold's data attributes.
Grouping = Callable[[int, ResultRow], tuple[str, dict[str, object]]]


def _timelines_section(
    rows: Sequence[ResultRow],
    facts: list[timelines.CellFacts],
    limit: int,
    group: Grouping,
    shown: Collection[int] = (),
    models: Sequence[CellTimeline] | None = None,
) -> tuple[str, str, str]:
    """Every cell's timeline but those `shown` elsewhere on the page, in folds by `group`."""
    drawn = models if models is not None else [timelines.cell_timeline(f, limit) for f in facts]
    cells = [(i, row, drawn[i]) for i, row in enumerate(rows) if drawn[i].rows and i not in shown]
    if not cells:
        return "timelines", "Timelines", _note("No op was faulted, or the run kept no per-op events (load).")
    opened = _opened(cells)
    groups: dict[str, list[tuple[int, CellTimeline, str]]] = {}
    attributes: dict[str, dict[str, object]] = {}
    for i, row, model in cells:
        title, attributes[title] = group(i, row)
        figure = _timeline_figure(i, reading.label(row), model, row, i in opened)
        groups.setdefault(title, []).append((i, model, figure))
    if len(groups) == 1:
        body = "".join(block for _, _, block in next(iter(groups.values())))
    else:  # one fold per group (a fault and scenario, as the heatmaps; a phase of a search): the page opens short
        body = ""
        for title, members in groups.items():
            name = f"{title}; {len(members)} cell(s), "
            name += _tally(sum(m.candidates for _, m, _ in members), _sum_tallies(m.tally for _, m, _ in members))
            body += el(
                "details",
                el("summary", esc(name)) + "".join(block for _, _, block in members),
                class_="timeline-group",
                open=any(i in opened for i, _, _ in members),
                **attributes[title],
            )
    kinds = {k for _, _, m in cells for r in m.rows for k in r.kinds()}
    outcomes = {r.outcome for _, _, m in cells for r in m.rows if r.outcome}
    intro = _note(
        "One timeline per cell, on one time axis from the cell's start: a row per op a fault struck (and any op"
        " whose outcome is bad), bad ops first, each coloured by what became of it at the provider. On each row,"
        " top to bottom: what the lab did (the fault's boundary reached, a fresh worker, the scenario's changes),"
        " the attempts (bars from start to end or kill; dashed: waiting in the queue), and the provider's effects"
        " at the time it applied them, from its log. Hover over anything for its details; each op's events are"
        f" listed below its cell's timeline. A timeline shows at most {limit} rows: every bad op first, then the"
        " others evenly spread in time order; where it leaves ops out, it says how many."
    )
    if shown:
        intro += _note("The counterexample's timeline is at the top of the page.")
    total = sum(m.candidates for _, _, m in cells)
    return "timelines", f"Timelines ({total})", intro + timeline_legend(kinds, outcomes) + body


def _by_group(i: int, row: ResultRow) -> tuple[str, dict[str, object]]:
    """The heatmap group a row's cell is in: its fault and scenario, and its Celery setting."""
    attributes: dict[str, object] = {"data_fault": row.fault, "data_scenario": row.scenario}
    return grid_title(row.fault, row.scenario, row.delivery or ""), attributes | {"data_delivery": row.delivery}


def _opened(models: Sequence[tuple[int, ResultRow, CellTimeline]]) -> set[int]:
    """The cells whose timelines open with the page: every failing cell's, and the first few with bad ops
    (or the first few) within OPEN_ROWS rows, at least one; the rest are one click away."""
    opened = {i for i, row, _ in models if not row.passed}
    rows = 0
    for i, _, model in sorted(models, key=lambda m: not m[2].bad)[:OPEN_CELLS]:
        rows += len(model.rows)
        if rows > OPEN_ROWS and rows > len(model.rows):
            break
        opened.add(i)
    return opened


def _sum_tallies(tallies: Iterable[Mapping[timelines.OpOutcome, int]]) -> dict[timelines.OpOutcome, int]:
    out: dict[timelines.OpOutcome, int] = {}
    for tally in tallies:
        for name, n in tally.items():
            out[name] = out.get(name, 0) + n
    return {name: out[name] for name in timelines.OUTCOMES if name in out}


def _tally(ops: int, tally: Mapping[timelines.OpOutcome, int]) -> str:
    said = ", ".join(f"{n} {timelines.OUTCOMES[name]}" for name, n in tally.items())
    return f"{ops} op(s)" + (f": {said}" if said else "")


def _timeline_figure(i: int, label: str, model: CellTimeline, row: ResultRow, opened: bool) -> str:
    stats = row.replay_latency_ms
    latency = f"; replay median {stats.median:,.1f} ms" if stats else ""
    count = el("span", esc(_tally(model.candidates, model.tally) + latency), class_="count")
    summary = el("summary", esc(label) + count)
    notes = "".join(_note(n) for n in (model.sampling(), _PROVIDER_NOTES.get(model.provider, "")) if n)
    figure = el(
        "figure",
        el("div", timeline_svg(model), class_="plot") + notes,
        class_="cell-timeline",
        data_cell=label,
        data_rows=len(model.rows),
        data_ops=model.candidates,
        data_provider=model.provider,
    )
    tables = "".join(
        _events_table(r.events, model.anchor, r.op, r.judged.word if r.judged else "", f"ev-{i}-{j}")
        for j, r in enumerate(model.rows)
        if r.events
    )
    if tables:
        shown = sum(bool(r.events) for r in model.rows)
        tables = el("details", el("summary", esc(f"each op's events ({shown})")) + tables, class_="op-events")
    return el(
        "details",
        summary + figure + tables,
        class_="cell-timelines",
        id=f"cell-{i}",
        open=opened,
        data_cell=label,
        data_ops=model.candidates,
    )


def _events_table(
    events: Sequence[StoredEvent],
    anchor: Anchor,
    op: str = "",
    word: str = "",
    element_id: str | None = None,
) -> str:
    """An op's events in time order, times in ms from the anchor of the plot it belongs to."""
    ordered = sorted(events, key=lambda e: e.at)
    t0 = anchor.at
    lines = [el("tr", "<th>ms</th><th>event</th><th>worker</th><th>details</th>")]
    for e in ordered:
        details = []
        for key, value in e.as_dict().items():
            if key in ("event", "at", "worker"):
                continue
            if key.endswith("At") and isinstance(value, int | float):
                value = f"{(value - t0) * 1000:+,.1f} ms"
            elif isinstance(value, list):
                value = ", ".join(map(str, value))
            details.append(f"{key} {value}")
        columns = [f"{(e.at - t0) * 1000:+,.1f}", e.event, e.get("worker", ""), "; ".join(details)]
        lines.append(el("tr", "".join(el("td", esc(c)) for c in columns), class_=f"ev-{e.event}"))
    what = ", ".join(p for p in (op, word) if p)
    what = f"{what}: " if what else ""
    summary = el("summary", esc(f"{what}{len(ordered)} events, ms from {anchor.name}"))
    table = el("table", "".join(lines), class_="events")
    return el("details", summary + table, class_="events-list", id=element_id, data_op=op or None)


# ---------------------------------------------------------------- latency


def _latency_section(
    results: Results, rows: Sequence[ResultRow], per_row: list[reading.History]
) -> tuple[str, str, str]:
    default = results.options.recovery
    modes: dict[str, dict[str, list[tuple[float, str]]]] = {}
    for i, row in enumerate(rows):
        label = reading.label(row)
        for op, events in per_row[i].items():
            spans = replay_latency(events)
            if spans is None:
                continue
            came_back = recovery_mode(row.fault, events, default, row.delivery)
            mode = modes.setdefault(came_back, {"requeue": [], "replay": []})
            if spans.requeue_ms is not None:
                mode["requeue"].append((spans.requeue_ms, f"{label}, {op}"))
            if spans.replay_ms is not None:
                mode["replay"].append((spans.replay_ms, f"{label}, {op}"))
    every = [v for values in modes.values() for span in values.values() for v, _ in span]
    extent = (min(every), max(every)) if every else None  # one axis for every mode: they compare at a glance
    figures = "".join(_latency_figure(name, values, extent) for name, values in modes.items())
    if not figures:
        figures = _note("No killed op's events in this run: no latency distribution to draw.")
    return "latency", "Replay latency", figures + _latency_table(rows)


def _latency_figure(
    mode: str, values: Mapping[str, list[tuple[float, str]]], extent: tuple[float, float] | None
) -> str:
    strips = [
        Strip("kill → requeue", "requeue", values["requeue"], latency_stats([v for v, _ in values["requeue"]])),
        Strip("kill → next attempt", "replay", values["replay"], latency_stats([v for v, _ in values["replay"]])),
    ]
    head = el("tr", "".join(el("th", h) for h in ("span", "n", "min", "median", "p99", "max")))
    lines = [head]
    for s in strips:
        stats = s.stats or {}
        numbers = [_stat(stats, k, len(s.values)) for k in ("min", "median", "p99", "max")]
        lines.append(el("tr", el("th", esc(s.name)) + "".join(el("td", esc(c)) for c in [len(s.values), *numbers])))
    notes = [f"p99 from {P99_FROM} values on (below, the dashed line is the maximum)."]
    if any(len(s.values) > MAX_DOTS for s in strips):
        notes.append(f"A strip draws {MAX_DOTS:,} of its values, evenly spread by value; the statistics are over all.")
    caption = el("figcaption", el("strong", esc(mode)) + esc(f" · {len(values['replay'])} kill(s) replayed"))
    plot = el("div", strip_plot(strips, extent=extent), class_="plot")
    body = caption + plot + el("table", "".join(lines), class_="stats") + _note(" ".join(notes))
    return el("figure", body, class_="latency-plot", data_mode=mode, data_kills=len(values["replay"]))


def _stat(stats: Mapping[str, float], key: str, n: int) -> str:
    """A statistic of n values, as the tables show it: no p99 of fewer than P99_FROM values."""
    if key not in stats or (key == "p99" and n < P99_FROM):
        return DASH
    return f"{stats[key]:,.1f}"


def _latency_table(rows: Sequence[ResultRow]) -> str:
    """The run's own kill-to-replay figures per cell (`replayLatencyMs`), for every cell with kills."""
    lines = [el("tr", "".join(el("th", h) for h in ("cell", "kills", "replays", "min", "median", "p99", "max")))]
    for row in rows:
        stats = row.replay_latency_ms
        if stats is None:
            continue
        numbers = [_stat(stats.model_dump(), k, row.kills) for k in ("min", "median", "p99", "max")]
        cells = [reading.label(row), row.kills, row.replays, *numbers]
        lines.append(el("tr", "".join(el("td", esc(c)) for c in cells)))
    if len(lines) == 1:
        return ""
    title = el("summary", "Kill to next attempt, per cell (ms, as the run measured it)")
    table = el("table", "".join(lines), class_="stats per-cell")
    return el("details", title + table, class_="per-cell", open=len(lines) <= 13)


# ---------------------------------------------------------------- load


def _load_section(rows: Sequence[ResultRow]) -> tuple[str, str, str]:
    grid = load_grid(rows)
    head = el("tr", "".join(el("th", esc(h)) for h in grid[0]))
    body = "".join(el("tr", "".join(el("td", esc(c)) for c in line)) for line in grid[1:])
    table = el("table", head + body, class_="stats load-table")
    with_series = [r for r in rows if r.series]
    if not with_series:
        return "load", "Load", table + _note("The rows carry no time series (`series`): nothing to draw over time.")
    plots = [
        ("throughput", "jobs over per second", _throughput),
        ("kills", "kills so far", lambda s: [(p["t"], p["kills"]) for p in s]),
        ("effects", "effects at the provider so far", lambda s: [(p["t"], p["effects"]) for p in s]),
    ]
    figures = ""
    for metric, caption, points in plots:
        lines = [Line(r.strategy, points([p.model_dump() for p in r.series or ()])) for r in with_series]
        chart = line_chart(lines, "seconds since the cell started")
        figures += el(
            "figure",
            el("figcaption", esc(caption)) + el("div", chart, class_="plot"),
            class_="load-plot",
            data_metric=metric,
        )
    return "load", "Load", table + figures


def _throughput(series: Sequence[Mapping[str, float]]) -> list[tuple[float, float]]:
    """Jobs over per second between consecutive samples, at the later one."""
    out = []
    for a, b in itertools.pairwise(series):
        if b["t"] > a["t"]:
            out.append((b["t"], (b["over"] - a["over"]) / (b["t"] - a["t"])))
    return out
