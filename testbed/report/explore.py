"""What `testbed explore` prints and the report shows of it (pure), from its
results (`Results.explore`): the search in figures, the counterexample as the
terminal prints it (`counterexample_text`: the report's first section is the
same text), with the command that replays it, and the coverage, which
(attempt, boundary, fault) the trials armed and how often each struck, as a
text table and as a heatmap (`#coverage`: one `figure.coverage[data-fault]` per
fault, `rect.struck[data-attempt][data-boundary]` per place armed); the trials
by the phases the search stored (whatever their names), the other failing
trials as the way to the counterexample, and the exploration in words.

A counterexample that failed in none of its confirming runs is unconfirmed: said so
everywhere (`headline`), its schedule kept to replay."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence

from labcore.boundaries import ORDER
from testbed.report import findings, replays
from testbed.report.svg import PALETTE, el, esc, svg, text, tip, void
from testbed.report.tables import aligned
from testbed.store.formats import StoredEvent
from testbed.store.results import Counterexample, ExploreSummary, ResultRow, Results, Struck

_CELL_W, _CELL_H, _LEFT, _TOP = 74, 26, 116, 22


def _faults(coverage: list[Struck]) -> list[str]:
    return list(dict.fromkeys(s.fault for s in coverage))


def _attempts(coverage: list[Struck]) -> list[int]:
    return list(range(1, max((s.attempt for s in coverage), default=0) + 1))


def coverage_text(summary: ExploreSummary) -> str:
    """Per fault and boundary, each attempt's `struck/armed`."""
    coverage = summary.coverage
    if not coverage:
        return "coverage: no fault was armed"
    attempts = _attempts(coverage)
    at = {(s.fault, s.boundary, s.attempt): s for s in coverage}
    grid = [["fault", "boundary", *(f"attempt {n}" for n in attempts)]]
    for fault in _faults(coverage):
        for boundary in (b.value for b in ORDER):
            found = [at.get((fault, boundary, n)) for n in attempts]
            if any(found):
                grid.append([fault, boundary, *(f"{s.struck}/{s.armed}" if s else "-" for s in found)])
    return "\n".join(["coverage (struck / armed, per attempt):", *aligned(grid)])


def headline(found: Counterexample) -> str:
    """What the search found, in one line: a counterexample, or one that did not reproduce."""
    ops = found.schedule.get("ops", [])
    faults = sum(len(op.get("faults", [])) for op in ops)
    # Found smallest first or shrunk to it, a counterexample is a smallest schedule that fails.
    shrunk = f"smallest: {len(ops)} op{'s' * (len(ops) != 1)}, {faults} fault{'s' * (faults != 1)}"
    lab = found.found == "lab"
    if not found.confirmed:
        what = "the model and the run disagreed" if lab else "it broke the promise"
        return (
            f"UNCONFIRMED for {found.target}: {what} in one trial ({shrunk}) and in none of its {found.runs}"
            f" fresh runs (reproduced 0 of {found.runs}): a flake of the machine, or a job that breaks only"
            " sometimes; not a counterexample until it reproduces"
        )
    bug = "the model and the run disagree (a bug of the lab, not a finding about the strategy)"
    what = bug if lab else "it breaks the promise"
    reproduced = f"reproduced {found.reproduced} of {found.runs} fresh runs"
    return f"COUNTEREXAMPLE for {found.target}: {what}; {shrunk}; {reproduced}"


def phase_counts(summary: ExploreSummary) -> list[tuple[str, int]]:
    """Each phase of the search and its trials, in the order they ran, as stored; a run stored
    before the phases were had searched, shrinking and confirming trials only."""
    if summary.phases:
        return [(p.phase, len(p.cells)) for p in summary.phases]
    older = [("search", summary.searched), ("shrink", summary.shrinking), ("confirm", summary.confirming)]
    return [(name, n) for name, n in older if n]


def figures_text(summary: ExploreSummary) -> str:
    """The search in figures: its trials per phase, why it ended, and what they found."""
    phases = ", ".join(f"{name} {n}" for name, n in phase_counts(summary))
    return "\n".join(
        [
            f"{summary.trials} trials in {summary.seconds:.0f} s ({summary.trials_per_minute:.0f} per minute;"
            f" {phases}); the search ended because {summary.stopped}",
            f"{summary.breaches} trials broke the promise; {summary.lab_failures} showed a failure of the lab",
        ]
    )


def counterexample_text(
    found: Counterexample, row: ResultRow | None = None, history: Mapping[str, Sequence[StoredEvent]] | None = None
) -> str:
    """The counterexample as the terminal prints it and its report opens with: what broke and how
    often it reproduced, what happened to each op, the command that replays it; with its row, on a
    disagreement with the model each op's facts, predicted and observed; with its ops' events, each
    killed op's attempts, one line each."""
    lines = [headline(found), *(f"  {line}" for line in found.words)]
    if found.replay:
        lines += ["replay it:", f"  {found.replay}"]
    if row is not None and found.found == "lab":
        lines.append(findings.listing([row]))
    if shown := replays.render({op: [e.as_dict() for e in events] for op, events in (history or {}).items()}):
        lines += ["", f"its ops killed, as the run saw them (trial {found.cell}):", shown]
    return "\n".join(lines)


def summary_text(summary: ExploreSummary) -> str:
    """The search in figures, then its counterexample, if it found one."""
    found = summary.counterexample
    return figures_text(summary) + ("" if found is None else f"\n\n{counterexample_text(found)}")


def covered_text(summary: ExploreSummary) -> str:
    """What a search that found nothing covered, in words."""
    coverage = summary.coverage
    said = f"No counterexample: {summary.trials} trials, and the search ended because {summary.stopped}."
    if not coverage:
        return f"{said} No fault was armed."
    faults = []
    for fault in _faults(coverage):
        mine = [s for s in coverage if s.fault == fault]
        struck = sum(s.struck > 0 for s in mine)
        attempts = max(s.attempt for s in mine)
        faults.append(f"{fault} at {len(mine)} ({struck} struck, on attempts 1 to {attempts})")
    reached = sum(s.struck > 0 for s in coverage)
    return (
        f"{said} They armed {len(coverage)} places (a fault at a boundary of an attempt), {reached} of them struck"
        f" at least once; by fault, places armed: {'; '.join(faults)}."
    )


# ---------------------------------------------------------------- the report


Section = tuple[str, str, str]  # id, title, markup


def trial_phases(results: Results) -> list[tuple[str, list[int]]]:
    """Each phase and its trials (indices of the rows), in the order they ran; trials of no stored
    phase (a run the lab failed under keeps no summary) last, in a phase of their own."""
    summary = results.explore
    rows = results.rows
    out: list[tuple[str, list[int]]] = []
    if summary is not None and summary.phases:
        index = {r.cell: i for i, r in enumerate(rows) if r.cell is not None}
        out = [(p.phase, [index[c] for c in p.cells if c in index]) for p in summary.phases]
    elif summary is not None:  # stored before the phases: the rows are in the order of the phases run
        start = 0
        for name, n in phase_counts(summary):
            out.append((name, list(range(start, min(start + n, len(rows))))))
            start += n
    placed = {i for _, members in out for i in members}
    if rest := [i for i in range(len(rows)) if i not in placed]:
        out.append(("judged before the lab failed" if results.incomplete else "other", rest))
    return [(name, members) for name, members in out if members]


def counterexample_index(results: Results) -> int | None:
    """The row of the counterexample's trial, if the search found one."""
    found = results.explore.counterexample if results.explore else None
    if found is None:
        return None
    return next((i for i, r in enumerate(results.rows) if r.cell is not None and r.cell == found.cell), None)


def counterexample_section(results: Results, history: Mapping[str, Sequence[StoredEvent]], timeline: str) -> Section:
    """The page's first section: the counterexample as the terminal printed it and its timeline; or what
    a search that found nothing covered; or that the lab failed before the search ended."""
    summary = results.explore
    if summary is None:
        failure = results.failure or "the run kept no summary of its search"
        what = f"The lab failed during the exploration ({failure}): no counterexample was kept."
        return "counterexample", "No counterexample", _note(f"{what} The {len(results.rows)} trials judged are below.")
    found = summary.counterexample
    if found is None:
        covered = el("p", esc(covered_text(summary)), class_="nothing-found")
        return "counterexample", "No counterexample", covered + _note("The coverage below has each place's counts.")
    i = counterexample_index(results)
    row = None if i is None else results.rows[i]
    # A line per element, the replay command's marked, no text between them: the terminal's text, in its order.
    said = counterexample_text(found, row, history).splitlines(keepends=True)
    replay = f"  {found.replay}"
    lines = [
        el("span", esc(line), class_="line replay" if found.replay and line.rstrip("\n") == replay else "line")
        for line in said
    ]
    confirmed = "true" if found.confirmed else "false"
    terminal = el("pre", "".join(lines), class_="terminal counterexample", data_confirmed=confirmed)
    if found.confirmed:
        return "counterexample", "Counterexample", terminal + timeline
    unconfirmed = (
        f"UNCONFIRMED: not a counterexample until it reproduces. It failed in one trial and in none of its"
        f" {found.runs} fresh runs (explore exits 4); its schedule is kept to replay."
    )
    lead = el("p", esc(unconfirmed), class_="unconfirmed")
    return "counterexample", "Unconfirmed counterexample", lead + terminal + timeline


def summary_sentences(results: Results) -> list[str]:
    """The exploration in a few sentences: its counterexample in words, how the search got there."""
    summary = results.explore
    if summary is None:
        return [f"The lab failed during the exploration: {len(results.rows)} trials judged, no counterexample kept."]
    phases = ", ".join(f"{n} in {name}" for name, n in phase_counts(summary))
    said = f"{summary.trials} trials ({phases}); {summary.breaches} broke the promise"
    said += f", {summary.lab_failures} showed a failure of the lab." if summary.lab_failures else "."
    found = summary.counterexample
    if found is None:
        return [covered_text(summary), said]
    i = counterexample_index(results)
    outcome = findings.bad_outcome(results.rows[i]) if i is not None else []
    ops = found.schedule.get("ops", [])
    faults = sum(len(op.get("faults", [])) for op in ops)
    shape = f"{len(ops)} op{'s' * (len(ops) != 1)} and {faults} fault{'s' * (faults != 1)}"
    if found.found == "lab":
        what = f"The model and the run disagree for {found.target} (a bug of the lab)"
    else:
        what = f"{found.target} breaks {results.options.promise or 'its promise'}"
    done = f": {', '.join(outcome)}" if outcome else ""
    if found.confirmed:
        first = f"{what} under a schedule of {shape}{done}; it did so again in {found.reproduced} of its"
        first += f" {found.runs} fresh runs."
    else:
        what = what[0].lower() + what[1:] if found.found == "lab" else what
        first = f"Unconfirmed: {what} under a schedule of {shape}{done} in one trial, and in none of its"
        first += f" {found.runs} fresh runs: a flake of the machine, or a job that breaks only sometimes."
    said = f"The search ran {said[0].lower()}{said[1:]}"
    return [first, *(f"{line[0].upper()}{line[1:]}." for line in found.words), said]


def trials_section(results: Results, links: Mapping[int, str]) -> Section:
    """Every trial, by the phase that ran it, in the order they ran: what it armed, what became of
    it; the counterexample's marked. `links`: where each trial's details are on the page."""
    found = counterexample_index(results)
    phases = trial_phases(results)
    if not phases:
        return "trials", "Trials", _note("The exploration ran no trial.")
    head = el("tr", "".join(el("th", h) for h in ("trial", "schedule", "verdict", "outcome", "s")))
    body = ""
    for name, members in phases:
        failing = sum(not results.rows[i].passed for i in members)
        lines = [head, *(_trial_line(i, results.rows[i], i == found, links.get(i)) for i in members)]
        table = el("table", "".join(lines), class_="trials")
        title = f"{name}: {len(members)} trial{'s' * (len(members) != 1)}, {failing} failing"
        body += el(
            "details",
            el("summary", esc(title)) + table,
            class_="phase",
            open=found in members or len(members) <= OPEN_TRIALS,
            data_phase=name,
            data_trials=len(members),
        )
    intro = _note("Each phase of the search in the order it ran, its trials in theirs.")
    return "trials", f"Trials ({len(results.rows)})", intro + body


OPEN_TRIALS = 20  # a phase of so many trials opens with the page (and the counterexample's)


def _trial_line(i: int, row: ResultRow, counterexample: bool, link: str | None) -> str:
    said = findings.cell_findings(row)
    trial = esc(row.cell or str(i))
    cells = [
        el("a", trial, href=link) if link else trial,
        esc(_armed(row) + (" (the counterexample)" if counterexample else "")),
        esc(said.verdict if row.passed else "; ".join(said.problems) or said.verdict),
        esc(said.outcome),
        esc(f"{row.wall_seconds:.2f}"),
    ]
    return el(
        "tr",
        "".join(el("td", c) for c in cells),
        class_=" ".join(filter(None, ["trial", f"verdict-{row.verdict}", "counterexample" * counterexample])),
        data_cell=row.cell,
        data_verdict=row.verdict,
    )


def _armed(row: ResultRow) -> str:
    """A trial's schedule, short: each op's faults, `kill@before-request#1` for attempt 1's."""
    ops = (row.schedule or {}).get("ops", [])
    said = [
        ", ".join(f"{f['fault']}@{f['boundary']}#{f['attempt']}" for f in op.get("faults", [])) or "clean" for op in ops
    ]
    scenario = "" if row.scenario == "none" else f" ({row.scenario})"
    return " | ".join(f"op {n}: {s}" for n, s in enumerate(said, 1)) + scenario


def way_there(results: Results, links: Mapping[int, str]) -> str:
    """The failing trials besides the counterexample, by phase: the search's way to it (its confirming
    runs among them, the same schedule again)."""
    found = results.explore.counterexample if results.explore else None
    at = counterexample_index(results)
    items = []
    for name, members in trial_phases(results):
        for i in members:
            row = results.rows[i]
            if row.passed or i == at:
                continue
            again = found is not None and row.schedule == found.schedule
            said = findings.cell_findings(row)
            what = f"{name}: trial {row.cell}, {_armed(row)}: {'; '.join(said.problems) or said.outcome}"
            what += " (the counterexample again)" if again else ""
            link = links.get(i)
            items.append(
                el("li", el("a", esc(what), href=link) if link else esc(what), data_cell=row.cell, data_phase=name)
            )
    if not items:
        return ""
    title = el("h3", esc(f"On the way there: {len(items)} other failing trial{'s' * (len(items) != 1)}"))
    return title + el("ul", "".join(items), class_="way-there")


def _note(content: str) -> str:
    return el("p", esc(content), class_="note")


def coverage_section(results: Results) -> Section | None:
    """The report's coverage heatmaps, for an explore run."""
    summary = results.explore
    if summary is None:
        return None
    intro = el("p", esc(figures_text(summary).split("\n")[0]), class_="note")
    if not summary.coverage:
        return "coverage", "Coverage", intro + _note("No fault was armed.")
    attempts = _attempts(summary.coverage)
    figures = "".join(_heatmap(fault, summary.coverage, attempts) for fault in _faults(summary.coverage))
    return "coverage", "Coverage", intro + figures


def _heatmap(fault: str, coverage: list[Struck], attempts: list[int]) -> str:
    places = {(s.boundary, s.attempt): s for s in coverage if s.fault == fault}
    boundaries = [b.value for b in ORDER if any((b.value, n) in places for n in attempts)]
    most = max(s.struck for s in places.values()) or 1
    parts = [
        text(_LEFT + (n - 0.5) * _CELL_W, _TOP - 8, f"attempt {n}", class_="tick", text_anchor="middle")
        for n in attempts
    ]
    for row, boundary in enumerate(boundaries):
        y = _TOP + row * _CELL_H
        parts.append(text(_LEFT - 8, y + _CELL_H * 0.65, boundary, class_="tick", text_anchor="end"))
        for n in attempts:
            s = places.get((boundary, n))
            x = _LEFT + (n - 1) * _CELL_W
            if s is None:
                parts.append(void("rect", x=x, y=y, width=_CELL_W - 2, height=_CELL_H - 2, fill="#eeeeee"))
                continue
            shade = 0.12 + 0.88 * s.struck / most
            label = f"{fault} at {boundary}, attempt {n}: armed in {s.armed} trials, struck {s.struck} times"
            rect = el(
                "rect",
                tip(label),
                x=x,
                y=y,
                width=_CELL_W - 2,
                height=_CELL_H - 2,
                fill=PALETTE[0],
                fill_opacity=round(shade, 2),
                class_="struck",
                data_attempt=n,
                data_boundary=boundary,
                data_struck=s.struck,
                data_armed=s.armed,
            )
            parts.append(rect)
            parts.append(text(x + _CELL_W / 2, y + _CELL_H * 0.65, f"{s.struck}/{s.armed}", text_anchor="middle"))
    width = _LEFT + len(attempts) * _CELL_W + 8
    height = _TOP + len(boundaries) * _CELL_H + 4
    drawing = svg(width, height, "".join(parts), class_="coverage-map")
    caption = el("figcaption", esc(f"{fault}: struck / armed, per boundary and attempt"))
    return el("figure", drawing + caption, class_="coverage", data_fault=fault)


# ---------------------------------------------------------------- JUnit


def junit_case(suite: ET.Element, results: Results) -> None:
    """An exploration as one test case: failing with its counterexample, if it found one."""
    summary = results.explore
    assert summary is not None
    targets = results.options.strategies or []
    name = "explore " + ", ".join([*targets, *(results.options.handlers or [])])
    case = ET.SubElement(suite, "testcase", {"classname": "explore", "name": name, "time": f"{summary.seconds:.3f}"})
    found = summary.counterexample
    if found is not None:
        message = "the model and the run disagree" if found.found == "lab" else f"{results.options.promise} breaks"
        if not found.confirmed:  # still a failure (explore exits 4), but said to be one that did not reproduce
            message = f"unconfirmed: {message} in one trial, in none of {found.runs} fresh runs"
        kind = found.found if found.confirmed else "unconfirmed"
        failure = ET.SubElement(case, "failure", {"message": message, "type": kind})
        failure.text = summary_text(summary)
    out = ET.SubElement(case, "system-out")
    out.text = coverage_text(summary)
