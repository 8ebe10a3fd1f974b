"""The report's plots as SVG text: an op's timeline (one lane per worker
process, in the manner of Jepsen's timeline.html), a strip plot of latencies,
and line charts of a time series. Pure: data in, markup out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from testbed.report.svg import PALETTE, Linear, Log, Scale, el, fmt, svg, text, tip, void, x_axis, y_axis

Event = Mapping[str, Any]
QUEUE = "queue"  # the lane of what happens to the job outside any worker: requeues, the nemesis


MINUS = "\u2212"  # typographic minus: ticks line up with the plus signs


def _signed_ms(value: float) -> str:
    return "0" if value == 0 else f"{'+' if value > 0 else MINUS}{fmt(abs(value))}"


# ---------------------------------------------------------------- timeline model


@dataclass(slots=True)
class Bar:
    """One attempt, in its worker's lane; times in ms from the anchor."""

    lane: str
    attempt: int
    pid: int | None
    start: float
    end: float | None = None
    how: str = "open"  # ended | killed | open (no end recorded)
    outcome: str = ""

    @property
    def replay(self) -> bool:
        return self.attempt > 1


@dataclass(frozen=True, slots=True)
class Mark:
    lane: str
    at: float
    kind: str  # hit | kill | contact | timeout | restart | requeue | enqueued | nemesis
    label: str  # short, drawn on the plot
    detail: str  # the tooltip


@dataclass(slots=True)
class OpTimeline:
    anchor: str  # what 0 ms is: "kill", "first hit" or "first event"
    lanes: list[str] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    links: list[tuple[float, float, str]] = field(default_factory=list)  # enqueued at -> started at, on lane
    dead: dict[str, float] = field(default_factory=dict)  # lane -> from when its worker is gone

    def span(self) -> tuple[float, float]:
        times = [0.0, *(m.at for m in self.marks)]
        for b in self.bars:
            times += [b.start] + ([b.end] if b.end is not None else [])
        return min(times), max(times)


def anchor_of(events: Sequence[Event]) -> tuple[str, float]:
    """0 ms: the first kill, or else the first hit (a fault that kills nothing), or else the first event."""
    for kind, name in (("killed", "kill"), ("hit", "first hit")):
        found = [e["at"] for e in events if e["event"] == kind]
        if found:
            return name, min(found)
    return "first event", min(e["at"] for e in events)


def op_timeline(events: Sequence[Event]) -> OpTimeline:
    """The lanes, bars and marks of one op's recorded events."""
    ordered = sorted(events, key=lambda e: e["at"])
    anchor, t0 = anchor_of(ordered)
    model = OpTimeline(anchor)

    def ms(at: float) -> float:
        return (at - t0) * 1000

    def lane(name: str) -> str:
        if name not in model.lanes:
            model.lanes.append(name)
        return name

    def bar_of(attempt: int | None, pids: Iterable[int | None]) -> Bar | None:
        wanted = set(pids)
        same = [b for b in model.bars if b.attempt == attempt]
        return next((b for b in same if b.pid in wanted), same[-1] if same else None)

    for e in ordered:
        kind, at, n = e["event"], ms(e["at"]), e.get("attempt")
        if kind == "attempt-start":
            model.bars.append(Bar(lane(e["worker"]), n or 0, e.get("pid"), at))
            enqueued = e.get("enqueuedAt")
            if n and n > 1 and enqueued is not None:
                lane(QUEUE)
                model.marks.append(Mark(QUEUE, ms(enqueued), "enqueued", f"enqueued #{n}", f"attempt {n} enqueued"))
                model.links.append((ms(enqueued), at, e["worker"]))
        elif kind == "attempt-end":
            bar = bar_of(n, [e.get("pid")])
            if bar is not None and bar.end is None:
                bar.end, bar.how = at, "ended"
                bar.outcome = str(e.get("outcome", ""))
        elif kind == "killed":
            pids = list(e.get("pids", []))
            bar = bar_of(n, pids)
            if bar is not None and bar.end is None:
                bar.end, bar.how = at, "killed"
            what = "worker and work-horse" if len(pids) > 1 else "work-horse"
            detail = f"SIGKILL at {e.get('boundary')}: {what} (pid {', '.join(map(str, pids))})"
            detail += f", confirmed gone in {e.get('confirmedMs')} ms"
            model.marks.append(Mark(lane(e["worker"]), at, "kill", "kill", detail))
            if len(pids) > 1:
                model.dead.setdefault(e["worker"], at)
        elif kind == "hit":
            bar = bar_of(n, [e.get("pid")])
            where = bar.lane if bar is not None else lane(QUEUE)
            detail = f"attempt {n} reached {e.get('boundary')} ({e.get('fault')})"
            model.marks.append(Mark(where, at, "hit", "hit", detail))
        elif kind == "contact":
            answer = e.get("answer", "")
            model.marks.append(Mark(lane(e["worker"]), at, "contact", str(answer), f"provider answered {answer}"))
        elif kind == "call-timeout":
            model.marks.append(Mark(lane(e["worker"]), at, "timeout", "timeout", "provider call timed out"))
        elif kind == "worker-restarted":
            detail = f"{e['fresh']} started in place of {e['dead']}"
            model.marks.append(Mark(lane(e["fresh"]), at, "restart", f"replaces {e['dead']}", detail))
            model.dead.setdefault(e["dead"], at)
        elif kind == "recovered":
            mode = e.get("mode", "")
            detail = f"requeued by {mode} recovery"
            model.marks.append(Mark(lane(QUEUE), at, "requeue", "requeued", detail))
        elif kind == "nemesis":
            action = e.get("action", "")
            model.marks.append(Mark(lane(QUEUE), at, "nemesis", str(action), f"nemesis: {action}"))
    if QUEUE in model.lanes:  # the queue lane on top, workers in order of appearance
        model.lanes.remove(QUEUE)
        model.lanes.insert(0, QUEUE)
    return model


# ---------------------------------------------------------------- timeline drawing

LANE_H = 50
CHAR_W = 6.4  # width of a character of the plots' 11 px labels, for keeping labels apart


class _Labels:
    """Keeps labels of one lane row from overprinting: a label that would overlap is left to its tooltip."""

    def __init__(self) -> None:
        self._taken: dict[tuple[str, str], list[tuple[float, float]]] = {}

    def free(self, lane: str, row: str, x: float, content: str, anchor: str = "middle") -> bool:
        width = len(content) * CHAR_W
        lo = x - width / 2 if anchor == "middle" else x
        span = (lo - 3, lo + width + 3)
        taken = self._taken.setdefault((lane, row), [])
        if any(a < span[1] and span[0] < b for a, b in taken):
            return False
        taken.append(span)
        return True


def _symbol(kind: str, x: float, y: float) -> str:
    if kind == "kill":
        d = f"M{x - 6:.1f},{y - 6:.1f}L{x + 6:.1f},{y + 6:.1f}M{x - 6:.1f},{y + 6:.1f}L{x + 6:.1f},{y - 6:.1f}"
        return void("path", d=d)
    if kind == "hit":
        return void("path", d=f"M{x:.1f},{y - 6:.1f}L{x + 6:.1f},{y:.1f}L{x:.1f},{y + 6:.1f}L{x - 6:.1f},{y:.1f}Z")
    if kind == "restart":
        return void("path", d=f"M{x:.1f},{y - 7:.1f}L{x + 6:.1f},{y + 5:.1f}L{x - 6:.1f},{y + 5:.1f}Z")
    if kind in ("timeout", "nemesis"):
        return void("rect", x=x - 5, y=y - 5, width=10, height=10)
    return void("circle", cx=x, cy=y, r=4.5)


def timeline_svg(model: OpTimeline, width: int = 1000) -> str:
    left, right, top = 76, 24, 22
    lo, hi = model.span()
    pad = max((hi - lo) * 0.04, 1.0)
    x = Linear.nice(lo - pad, hi + pad, left, width - right, 8)
    height = top + LANE_H * len(model.lanes) + 40
    bottom = top + LANE_H * len(model.lanes)
    labels = _Labels()
    parts = []
    for i, name in enumerate(model.lanes):
        y0 = top + i * LANE_H
        lane_body = [void("rect", x=left, y=y0, width=width - left - right, height=LANE_H, class_="lane-bg")]
        lane_body.append(text(left - 10, y0 + 30, name, class_="lane-name", text_anchor="end"))
        if name in model.dead:
            x0 = x(model.dead[name])
            lane_body.append(void("rect", x=x0, y=y0 + 3, width=max(0.0, x.r1 - x0), height=LANE_H - 6, class_="dead"))
        kind = "queue" if name == QUEUE else "worker"
        parts.append(el("g", "".join(lane_body), class_=f"lane {kind}", data_worker=name))
    anchor_x = x(0.0)
    parts.append(void("line", x1=anchor_x, x2=anchor_x, y1=top - 6, y2=bottom, class_="anchor-line"))
    parts.append(text(anchor_x + 4, top - 8, model.anchor, class_="anchor-label"))
    for enqueued, started, worker in model.links:
        y1 = top + model.lanes.index(QUEUE) * LANE_H + 26
        y2 = top + model.lanes.index(worker) * LANE_H + 26
        parts.append(void("path", d=f"M{x(enqueued):.1f},{y1}L{x(started):.1f},{y2}", class_="requeue-link"))
    parts += [_bar(b, x, top + model.lanes.index(b.lane) * LANE_H, labels) for b in model.bars]
    parts += [_mark(m, x, top + model.lanes.index(m.lane) * LANE_H, labels) for m in model.marks]
    parts.append(x_axis(x, bottom + 2, top, _signed_ms, 8, f"ms from the {model.anchor}"))
    return svg(width, height, "".join(parts), class_="timeline-svg")


def _bar(bar: Bar, x: Linear, y0: float, labels: _Labels) -> str:
    x0 = x(bar.start)
    x1 = x(bar.end) if bar.end is not None else x.r1
    detail = f"attempt {bar.attempt} (pid {bar.pid}): {bar.start:+.1f} ms"
    if bar.end is not None:
        detail += f" to {bar.end:+.1f} ms, {bar.outcome or bar.how}"
    else:
        detail += ", no end recorded"
    body = [tip(detail), void("rect", x=x0, y=y0 + 20, width=max(2.0, x1 - x0), height=12, rx=2)]
    caption = f"#{bar.attempt} pid {bar.pid}" + (f" · {bar.outcome}" if bar.outcome else "")
    # Near the right edge the caption ends where the bar ends, so it stays on the plot.
    lx = x0 if x0 + len(caption) * CHAR_W <= x.r1 + 16 else max(x.r0, x1 - len(caption) * CHAR_W)
    if labels.free(bar.lane, "above", lx, caption, "start"):
        body.append(text(lx, y0 + 14, caption, class_="bar-label"))
    classes = f"attempt {'replay' if bar.replay else 'first'} {bar.how}"
    return el("g", "".join(body), class_=classes, data_attempt=bar.attempt, data_pid=bar.pid)


def _mark(mark: Mark, x: Linear, y0: float, labels: _Labels) -> str:
    cx = x(mark.at)
    body = [tip(f"{mark.at:+.1f} ms: {mark.detail}"), _symbol(mark.kind, cx, y0 + 26)]
    if labels.free(mark.lane, "below", cx, mark.label):
        body.append(text(cx, y0 + 45, mark.label, class_="mark-label", text_anchor="middle"))
    return el("g", "".join(body), class_=f"mark {mark.kind}", data_at=f"{mark.at:.1f}")


def timeline_legend() -> str:
    """The symbols of the timelines, once for the page: an HTML row of small SVG icons (the browser lays
    the labels out, so they never overprint)."""
    items = [
        ("first", "attempt"),
        ("replay", "replayed attempt"),
        ("kill", "SIGKILL"),
        ("hit", "fault boundary reached"),
        ("contact", "provider answer"),
        ("timeout", "call timed out"),
        ("nemesis", "nemesis"),
        ("restart", "fresh worker"),
        ("requeue", "requeued"),
        ("enqueued", "enqueued again"),
        ("dead", "worker gone"),
    ]
    out = []
    for kind, name in items:
        if kind in ("first", "replay"):
            icon = el("g", void("rect", x=1, y=4, width=22, height=10, rx=2), class_=f"attempt {kind}")
        elif kind == "dead":
            icon = void("rect", x=2, y=1, width=20, height=16, class_="dead")
        else:
            icon = el("g", _symbol(kind, 12, 9), class_=f"mark {kind}")
        out.append(el("span", svg(24, 18, icon) + el("span", name), class_="legend-item"))
    return el("div", "".join(out), class_="legend")


# ---------------------------------------------------------------- latency strips


@dataclass(frozen=True, slots=True)
class Strip:
    name: str
    kind: str  # requeue | replay
    values: list[tuple[float, str]]  # (ms, tooltip)
    stats: Mapping[str, float] | None  # min / median / p99 / max of the values


def strip_plot(strips: Sequence[Strip], width: int = 1000, extent: tuple[float, float] | None = None) -> str:
    """One row of dots per strip, median (solid) and p99 (dashed) marked. Requeues take milliseconds
    and replays up to a minute, so a wide range is drawn on a log scale. `extent`: the (min, max)
    to scale to, so that plots drawn side by side share their axis."""
    left, right, top, row = 150, 24, 16, 66
    values = [v for s in strips for v, _ in s.values]
    lo, hi = extent or (min(values, default=1.0), max(values, default=1.0))
    wide = lo <= 0 or hi / max(lo, 1e-9) > 20
    x: Scale = Log.nice(max(lo, 0.1), hi, left, width - right) if wide else Linear.nice(0.0, hi, left, width - right)
    bottom = top + row * len(strips)
    parts = []
    for i, strip in enumerate(strips):
        y0 = top + i * row
        body = [void("rect", x=left, y=y0 + 4, width=width - left - right, height=row - 8, class_="lane-bg")]
        body.append(text(left - 10, y0 + row / 2 + 4, strip.name, class_="lane-name", text_anchor="end"))
        for j, (value, note) in enumerate(strip.values):
            jitter = (j * 0.6180339887) % 1.0  # golden-ratio spread: deterministic, no overlap pattern
            cy = y0 + 20 + jitter * (row - 40)
            body.append(el("circle", tip(f"{note}: {value:.1f} ms"), cx=x(value), cy=cy, r=4, class_="dot"))
        if strip.stats:
            # median's label at the top left of its line, p99's at the bottom right: they never collide
            for key, ly, anchor, dx in (("median", y0 + 15, "end", -4), ("p99", y0 + row - 8, "start", 4)):
                sx = x(strip.stats[key])
                body.append(void("line", x1=sx, x2=sx, y1=y0 + 4, y2=y0 + row - 4, class_=f"stat {key}"))
                label = f"{key} {strip.stats[key]:,.1f}"
                body.append(text(sx + dx, ly, label, class_=f"stat-label {key}", text_anchor=anchor))
        kind = strip.kind
        parts.append(el("g", "".join(body), class_=f"strip {kind}", data_kind=kind, data_n=len(strip.values)))
    caption = "ms from the kill" + (" (log scale)" if wide else "")
    parts.append(x_axis(x, bottom + 2, top + 4, fmt, 8, caption))
    return svg(width, bottom + 40, "".join(parts), class_="strip-svg")


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
