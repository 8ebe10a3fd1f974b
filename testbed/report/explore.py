"""What `testbed explore` prints and the report shows of it (pure), from its
results (`Results.explore`): the search in figures, the counterexample in
words with the command that replays it, and the coverage, which (attempt,
boundary, fault) the trials armed and how often each struck, as a text table
and as a heatmap (`#coverage`: the counterexample's headline as
`p.counterexample[data-confirmed]`, one `figure.coverage[data-fault]` per fault,
`rect.struck[data-attempt][data-boundary]` per place armed).

A counterexample that failed in none of its confirming runs is unconfirmed: said so
everywhere (`headline`), its schedule kept to replay."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from labcore.boundaries import ORDER
from testbed.report.svg import PALETTE, el, esc, svg, text, tip, void
from testbed.report.tables import aligned
from testbed.store.results import Counterexample, ExploreSummary, Results, Struck

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
    shrunk = f"shrunk to {len(ops)} op{'s' * (len(ops) != 1)}, {faults} fault{'s' * (faults != 1)}"
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


def summary_text(summary: ExploreSummary) -> str:
    """The search in figures, then its counterexample, if it found one."""
    lines = [
        f"{summary.trials} trials in {summary.seconds:.0f} s ({summary.trials_per_minute:.0f} per minute):"
        f" {summary.searched} searching, {summary.shrinking} shrinking, {summary.confirming} confirming;"
        f" the search ended because {summary.stopped}",
        f"{summary.breaches} trials broke the promise; {summary.lab_failures} showed a failure of the lab",
    ]
    found = summary.counterexample
    if found is None:
        return "\n".join(lines)
    lines += ["", headline(found), *(f"  {line}" for line in found.words)]
    if found.replay:
        lines += ["replay it:", f"  {found.replay}"]
    return "\n".join(lines)


# ---------------------------------------------------------------- the report


def coverage_section(results: Results) -> tuple[str, str, str] | None:
    """The report's coverage heatmaps, for an explore run."""
    summary = results.explore
    if summary is None:
        return None
    intro = el("p", esc(summary_text(summary).split("\n")[0]), class_="note")
    found = summary.counterexample
    if found is not None:
        confirmed = "true" if found.confirmed else "false"
        intro += el("p", esc(headline(found)), class_="counterexample", data_confirmed=confirmed)
    if not summary.coverage:
        return "coverage", "Coverage", intro
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
