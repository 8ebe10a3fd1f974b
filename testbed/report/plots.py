"""The report's plots as SVG text: a cell's timeline (a row per op on one time
axis, `testbed.report.timelines`), a strip plot of latencies, and line charts of
a time series. Pure: data in, markup out.

No text is drawn inside a plot's data area: names sit in its left margin,
numbers in tooltips and tables, so a label never collides with a line, a
mark or another label.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from testbed.report.svg import PALETTE, Linear, Log, Scale, el, esc, fmt, svg, text, tip, void, x_axis, y_axis
from testbed.report.timelines import OUTCOMES, CellTimeline, Mark, OpRow, Span, Track, spread

# ---------------------------------------------------------------- a cell's timeline

GUTTER = 236  # the left margin: each row's op and outcome
RIGHT = 16
ROW_H = 34  # a row with one attempt at a time; each attempt that overlaps another adds SLOT_H
SLOT_H = 11
TRACK_Y: dict[Track, float] = {"lab": 7, "attempt": 17, "provider": 27}  # from the row's top (see `symbol`)
GAP = 9.0  # px between two marks of one track: never on top of each other
AXIS_H = 30
SECONDS_FROM = 10_000  # ms: a longer axis is labelled in seconds
OP_CHARS = 34  # of an op's name in the margin; the tooltip has all of it


def _tracks_y(row: OpRow, y0: float, slot: int = 0) -> dict[Track, float]:
    extra = (row.slots - 1) * SLOT_H
    return {
        "lab": y0 + TRACK_Y["lab"],
        "attempt": y0 + TRACK_Y["attempt"] + slot * SLOT_H,
        "provider": y0 + TRACK_Y["provider"] + extra,
    }


def _row_height(row: OpRow) -> float:
    return ROW_H + (row.slots - 1) * SLOT_H


def symbol(kind: str, x: float, y: float) -> str:
    """A mark's shape, centred on (x, y), at most 10 px high: the tracks are 10 px apart."""
    if kind in ("kill", "kill-worker", "provider-kill"):
        d = f"M{x - 4:.1f},{y - 4:.1f}L{x + 4:.1f},{y + 4:.1f}M{x - 4:.1f},{y + 4:.1f}L{x + 4:.1f},{y - 4:.1f}"
        cross = void("path", d=d)
        return cross + (void("rect", x=x - 5, y=y - 5, width=10, height=10) if kind == "kill-worker" else "")
    if kind == "hit":
        return void(
            "path", d=f"M{x:.1f},{y - 4.5:.1f}L{x + 4.5:.1f},{y:.1f}L{x:.1f},{y + 4.5:.1f}L{x - 4.5:.1f},{y:.1f}Z"
        )
    if kind == "restart":
        return void("path", d=f"M{x:.1f},{y - 4:.1f}L{x + 4.5:.1f},{y + 4:.1f}L{x - 4.5:.1f},{y + 4:.1f}Z")
    if kind in ("timeout", "nemesis"):
        return void("rect", x=x - 3.5, y=y - 3.5, width=7, height=7)
    if kind == "withdrawn":
        return void("circle", cx=x, cy=y, r=3.6) + void("path", d=f"M{x - 3:.1f},{y + 3:.1f}L{x + 3:.1f},{y - 3:.1f}")
    return void("circle", cx=x, cy=y, r=3.6)


def timeline_svg(model: CellTimeline, width: int = 1000) -> str:
    """The cell's rows on one axis: per row, the lab's marks, the attempts and the provider's effects."""
    seconds = model.end > SECONDS_FROM
    top = AXIS_H if len(model.rows) > 8 else 8  # a tall timeline has its axis above it too
    named = any(r.op or r.judged for r in model.rows)  # an op's own chart (under its name) needs no margin
    x = Linear.nice(0.0, max(model.end * 1.02, 1.0), GUTTER if named else RIGHT, width - RIGHT, 8)
    bottom = top + sum(_row_height(r) for r in model.rows)

    def label(value: float) -> str:
        return fmt(value / 1000) if seconds else fmt(value)

    caption = f"{'s' if seconds else 'ms'} from {model.anchor.name}"
    parts = [x_axis(x, bottom + 2, top, label, 8, caption)]
    if top > 8:
        parts.append(_top_axis(x, top, label))
    y0: float = top
    for row in model.rows:
        parts.append(_row(row, x, y0))
        y0 += _row_height(row)
    return svg(width, bottom + 40, "".join(parts), class_="timeline-svg")


def _top_axis(x: Linear, top: float, label: Callable[[float], str]) -> str:
    ticks = "".join(text(x(t), top - 8, label(t), class_="tick", text_anchor="middle") for t in x.ticks(8))
    return el("g", void("line", x1=x.r0, x2=x.r1, y1=top - 2, y2=top - 2, class_="axis") + ticks, class_="x-axis top")


def _row(row: OpRow, x: Linear, y0: float) -> str:
    height = _row_height(row)
    outcome = row.outcome or "none"
    words = row.judged.word if row.judged else ""
    name = row.op if len(row.op) <= OP_CHARS else "\u2026" + row.op[-(OP_CHARS - 1) :]
    body = [void("rect", x=x.r0, y=y0 + 1, width=x.r1 - x.r0, height=height - 2, class_="row-band")]
    if x.r0 >= GUTTER:
        margin = [
            tip(f"{row.op}: {row.judged.said}" if row.judged else row.op),
            void("rect", x=2, y=y0 + 2, width=GUTTER - 10, height=height - 4, rx=4, class_="op-chip"),
            text(10, y0 + 15, name, class_="op-name"),
        ]
        if words:
            margin.append(text(10, y0 + 28, words, class_="op-outcome"))
        body.append(el("g", "".join(margin), class_="op-margin"))
    body += [_span(s, row, x, y0) for s in row.spans]
    for i, bar in enumerate(row.bars):
        y = _tracks_y(row, y0, bar.slot)["attempt"]
        x0 = x(bar.start)
        x1 = x(bar.end) if bar.end is not None else x.r1
        rect = void("rect", x=x0, y=y - 4, width=max(2.0, x1 - x0), height=8, rx=2)
        kind = "replay" if bar.attempt > 1 else "first"
        body.append(
            el(
                "g",
                tip(bar.detail()) + rect,
                class_=f"attempt {kind} {bar.how}",
                data_attempt=bar.attempt,
                data_pid=bar.pid,
                data_worker=bar.worker,
                data_bar=i,
            )
        )
    body += _marks(row, x, y0)
    return el("g", "".join(body), class_=f"op-row outcome-{outcome}", data_op=row.op, data_outcome=outcome)


def _span(span: Span, row: OpRow, x: Linear, y0: float) -> str:
    y = _tracks_y(row, y0, row.slot_of(span.bar))[span.track]
    x0, x1 = x(span.start), x(span.end) if span.end is not None else x.r1
    if span.kind == "queued":
        shape = void("line", x1=x0, x2=max(x0, x1), y1=y, y2=y)
    else:
        shape = void("rect", x=x0, y=y - 5, width=max(2.0, x1 - x0), height=10, rx=2)
    return el("g", tip(span.detail) + shape, class_=f"span {span.kind}", data_start=f"{span.start:.1f}")


def _marks(row: OpRow, x: Linear, y0: float) -> list[str]:
    """Each mark on its track, moved right just enough (GAP) not to cover the one before:
    the exact time is in its tooltip."""
    lanes: dict[tuple[Track, int], list[Mark]] = {}
    for mark in row.marks:
        lanes.setdefault((mark.track, row.slot_of(mark.bar) if mark.track == "attempt" else 0), []).append(mark)
    out = []
    for (track, slot), marks in lanes.items():
        y = _tracks_y(row, y0, slot)[track]
        last = float("-inf")
        for mark in sorted(marks, key=lambda m: m.at):
            cx = max(x(mark.at), last + GAP)
            last = cx
            body = tip(f"{mark.at:,.1f} ms: {mark.detail}") + symbol(mark.kind, cx, y)
            out.append(el("g", body, class_=f"mark {mark.kind}", data_at=f"{mark.at:.1f}", data_track=track))
    return out


# What the legend says of each thing a timeline draws, in its order.
LEGEND: dict[str, str] = {
    "attempt-ended": "attempt (start to end)",
    "attempt-killed": "attempt killed",
    "attempt-open": "attempt with no end recorded",
    "queued": "waiting in the queue",
    "hit": "fault's boundary reached",
    "kill": "work-horse SIGKILLed",
    "kill-worker": "worker and work-horse SIGKILLed",
    "timeout": "call timed out",
    "cut": "host cut off from the provider",
    "restart": "fresh worker",
    "requeue": "job requeued by recovery",
    "nemesis": "the scenario changes the world",
    "effect": "effect applied by the provider",
    "withdrawn": "effect withdrawn",
    "provider-kill": "provider SIGKILLed",
    "provider-down": "provider down",
}


def timeline_legend(kinds: Iterable[str], outcomes: Iterable[str]) -> str:
    """The outcomes' colours and the symbols of what the page's timelines draw (only those), as HTML
    with small SVG icons: the browser lays the words out, so they never overprint."""
    wanted, present = set(kinds), set(outcomes)
    out = [
        el("span", esc(words), class_=f"legend-item chip op-outcome-{o}")
        for o, words in OUTCOMES.items()
        if o in present
    ]
    for kind, words in LEGEND.items():
        if kind not in wanted:
            continue
        if kind.startswith("attempt-"):
            how = kind.removeprefix("attempt-")
            icon = el("g", void("rect", x=1, y=5, width=17, height=8, rx=2), class_=f"attempt first {how}")
            if how == "killed":
                icon += el("g", symbol("kill", 18, 9), class_="mark kill")
        elif kind == "queued":
            icon = el("g", void("line", x1=1, x2=23, y1=9, y2=9), class_="span queued")
        elif kind in ("cut", "provider-down"):
            icon = el("g", void("rect", x=1, y=4, width=22, height=10, rx=2), class_=f"span {kind}")
        else:
            icon = el("g", symbol(kind, 12, 9), class_=f"mark {kind}")
        out.append(el("span", svg(24, 18, icon) + el("span", esc(words)), class_="legend-item"))
    return el("div", "".join(out), class_="legend")


# ---------------------------------------------------------------- latency strips


P99_FROM = 20  # samples: below this a 99th percentile is the maximum by another name, so the maximum is shown
MAX_DOTS = 1000  # per strip: a long run's strip is drawn from this many of its values, spread by value
CHAR_W = 6.4  # width of a character of the plots' 11 px labels


@dataclass(frozen=True, slots=True)
class Strip:
    name: str
    kind: str  # requeue | replay
    values: list[tuple[float, str]]  # (ms, tooltip)
    stats: Mapping[str, float] | None  # min / median / p99 / max of the values


def tail(stats: Mapping[str, float], n: int) -> tuple[str, float]:
    """The high statistic worth showing for n samples: p99 from P99_FROM samples on, else the maximum."""
    return ("p99", stats["p99"]) if n >= P99_FROM else ("max", stats["max"])


def strip_plot(strips: Sequence[Strip], width: int = 1000, extent: tuple[float, float] | None = None) -> str:
    """One row of dots per strip, its median (solid) and its tail (dashed: p99, or the maximum of
    few samples) marked. Requeues take milliseconds and replays up to a minute, so a wide range is
    drawn on a log scale. `extent`: the (min, max) to scale to, so that plots drawn side by side
    share their axis. The statistics' labels sit in a band above the lines, each on the side away
    from the other, inside the plot."""
    left, right, top, row, band = 150, 24, 16, 70, 16
    values = [v for s in strips for v, _ in s.values]
    lo, hi = extent or (min(values, default=1.0), max(values, default=1.0))
    wide = lo <= 0 or hi / max(lo, 1e-9) > 20
    x: Scale = Log.nice(max(lo, 0.1), hi, left, width - right) if wide else Linear.nice(0.0, hi, left, width - right)
    bottom = top + row * len(strips)
    parts = []
    for i, strip in enumerate(strips):
        y0 = top + i * row
        body = [
            void("rect", x=left, y=y0 + 4 + band, width=width - left - right, height=row - 8 - band, class_="lane-bg")
        ]
        body.append(
            text(left - 10, y0 + band + (row - band) / 2 + 4, strip.name, class_="lane-name", text_anchor="end")
        )
        drawn = spread(sorted(strip.values), MAX_DOTS)
        for j, (value, note) in enumerate(drawn):
            jitter = (j * 0.6180339887) % 1.0  # golden-ratio spread: deterministic, no overlap pattern
            cy = y0 + band + 14 + jitter * (row - band - 28)
            body.append(el("circle", tip(f"{note}: {value:.1f} ms"), cx=x(value), cy=cy, r=4, class_="dot"))
        if strip.stats:
            stats = [("median", strip.stats["median"]), tail(strip.stats, len(strip.values))]
            lines = [(key, x(value)) for key, value in stats]
            starts = _label_starts([(f"{key} {value:,.1f}", x(value)) for key, value in stats], 2.0, width - 2.0)
            for (key, sx), (label, lx) in zip(lines, starts, strict=True):
                body.append(void("line", x1=sx, x2=sx, y1=y0 + 4 + band, y2=y0 + row - 4, class_=f"stat {key}"))
                body.append(text(lx, y0 + band, label, class_=f"stat-label {key}"))
        kind = strip.kind
        parts.append(
            el(
                "g",
                "".join(body),
                class_=f"strip {kind}",
                data_kind=kind,
                data_n=len(strip.values),
                data_drawn=len(drawn),
            )
        )
    caption = "ms from the kill" + (" (log scale)" if wide else "")
    parts.append(x_axis(x, bottom + 2, top + 4 + band, fmt, 8, caption))
    return svg(width, bottom + 40, "".join(parts), class_="strip-svg")


def _label_starts(labels: Sequence[tuple[str, float]], lo: float, hi: float) -> list[tuple[str, float]]:
    """Where two labels of lines at x (low, high) start: the low one ends left of its line, the high one
    starts right of its own, both kept within [lo, hi], and apart by 8 px at least."""
    (low, x_low), (high, x_high) = labels
    w_low, w_high = len(low) * CHAR_W, len(high) * CHAR_W
    start_high = min(x_high + 4, hi - w_high)
    start_low = max(lo, min(x_low - 4 - w_low, start_high - 8 - w_low))
    start_high = max(start_high, start_low + w_low + 8)
    return [(low, start_low), (high, start_high)]


# ---------------------------------------------------------------- time series


@dataclass(frozen=True, slots=True)
class Line:
    name: str
    points: list[tuple[float, float]]


def line_chart(lines: Sequence[Line], x_caption: str, width: int = 1000) -> str:
    """One polyline per series, a legend on the right (the y caption is the figure's)."""
    left, right, top, height = 70, 170, 14, 240
    xs = [p[0] for line in lines for p in line.points] or [0.0, 1.0]
    ys = [p[1] for line in lines for p in line.points] or [0.0, 1.0]
    x = Linear.nice(min(xs), max(xs), left, width - right, 8)
    y = Linear.nice(min(0.0, min(ys)), max(ys), height - 30, top, 5)
    parts = [y_axis(y, left, width - right, fmt), x_axis(x, height - 30, y.r1, fmt, 8, x_caption)]
    for i, line in enumerate(lines):
        colour = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{x(px):.1f},{y(py):.1f}" for px, py in line.points)
        parts.append(
            el("polyline", tip(line.name), points=coords, stroke=colour, class_="series-line", data_strategy=line.name)
        )
        ly = top + 14 + i * 18
        parts.append(void("line", x1=width - right + 14, x2=width - right + 34, y1=ly - 4, y2=ly - 4, stroke=colour))
        parts.append(text(width - right + 40, ly, line.name, class_="legend-text"))
    return svg(width, height + 14, "".join(parts), class_="chart-svg")
