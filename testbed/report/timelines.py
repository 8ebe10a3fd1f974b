"""One timeline per cell (pure): the cell's faulted ops on one time axis, in
the manner of Jepsen's timeline.html (there a column per process and an op
as a bar coloured by how it ended; here a row per op, its attempts as bars).

Each row is an op a fault struck (or one whose outcome is bad, or that the
run names: held, breaking the promise, differing from the model), coloured
by what became of it at the provider: exactly once, duplicated, missing,
held, failed by provider. On the row, three tracks, so that what happens at
nearly the same moment is never drawn on top of itself:

- the lab's: the fault's hit, a fresh worker, a recovery, the planner's changes;
- the attempts': each attempt a bar from its start to its end or its kill,
  its wait in the queue, its call timing out, its host cut off;
- the provider's: each effect at the time the provider applied it (from the
  stored provider log), withdrawals, the provider killed and back.

Events in, rows, bars, marks and spans out; the drawing is `plots.timeline_svg`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from testbed.judge.checker import HELD_OUTCOMES, OUTCOME_WORDS, ActionOutcome, classify
from testbed.report.effects import AtProvider, Effect, Ledger, Source
from testbed.report.reading import faulted
from testbed.store.formats import StoredEvent
from testbed.store.history import LocalFacts
from testbed.store.results import HeldOp
from workers.flow import LOCALLY_DONE, Outcome

Event = StoredEvent
T = TypeVar("T")
OpOutcome = ActionOutcome | Literal["unknown"]  # unknown: the run kept no record of the provider's side
Track = Literal["lab", "attempt", "provider"]

# What became of an op, worst first (the order of the rows), in the judge's words.
OUTCOMES: dict[OpOutcome, str] = {outcome: words for outcome, words in OUTCOME_WORDS.items()} | {"unknown": "not known"}
BAD: frozenset[OpOutcome] = frozenset({"duplicated", "missing", "held"})
ROWS = 50  # at most, per cell: a long cell's timeline stays readable and the page light

# The scenario's changes that act on the provider's state (the rest, on the planner's): drawn on its track.
_AT_PROVIDER = frozenset({"withdraw", "expire-keys"})
_SLACK = 60.0  # seconds: how far before the cell's first event a provider time may lie and still be the cell's


@dataclass(frozen=True, slots=True)
class Anchor:
    """What 0 is on the time axis."""

    name: str
    at: float  # seconds since the epoch


@dataclass(slots=True)
class Bar:
    """One attempt, from its start to its end or its kill; times in ms from the anchor."""

    attempt: int
    worker: str
    pid: int | None
    start: float
    end: float | None = None
    how: str = "open"  # ended | killed | open (no end recorded)
    outcome: str = ""
    said: list[str] = field(default_factory=list)  # the provider's answers, the attempt's last words
    slot: int = 0  # bars of one op that overlap in time (a duplicate job) are drawn one above the other

    def detail(self) -> str:
        end = "no end recorded" if self.end is None else f"to {self.end:,.1f} ms, {self.outcome or self.how}"
        said = f" ({'; '.join(self.said)})" if self.said else ""
        return f"attempt {self.attempt} in {self.worker} (pid {self.pid}): {self.start:,.1f} ms {end}{said}"


@dataclass(frozen=True, slots=True)
class Mark:
    """Something that happened at one moment. On the attempts' track, `bar` is the attempt's index."""

    track: Track
    at: float
    kind: str  # hit, restart, requeue, nemesis | kill, kill-worker, timeout | effect, withdrawn, provider-kill
    detail: str
    bar: int | None = None


@dataclass(frozen=True, slots=True)
class Span:
    """Something that lasted: a wait in the queue, a host cut off, the provider down."""

    track: Track
    start: float
    end: float | None  # None: to the end of the axis
    kind: str  # queued | cut | provider-down
    detail: str
    bar: int | None = None


@dataclass(slots=True)
class OpRow:
    op: str
    judged: ActionFate | None  # None: not judged here (an op's own chart)
    bars: list[Bar] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)  # in time order

    @property
    def outcome(self) -> OpOutcome | None:
        return None if self.judged is None else self.judged.outcome

    @property
    def slots(self) -> int:
        return 1 + max((b.slot for b in self.bars), default=0)

    def slot_of(self, bar: int | None) -> int:
        return 0 if bar is None or not self.bars else self.bars[bar].slot

    def kinds(self) -> set[str]:
        return {m.kind for m in self.marks} | {s.kind for s in self.spans} | {f"attempt-{b.how}" for b in self.bars}


@dataclass(slots=True)
class CellTimeline:
    anchor: Anchor
    end: float  # ms from the anchor: the axis runs from 0 to here
    rows: list[OpRow]
    candidates: int  # ops the timeline is about, shown or not
    bad: int  # of which bad (or named by the run)
    shown_bad: int  # of the bad ones, shown
    provider: Source = "log"  # what the run kept of the provider's side
    tally: dict[OpOutcome, int] = field(default_factory=dict)  # the ops it is about, by outcome, worst first

    @property
    def sampled(self) -> bool:
        return len(self.rows) < self.candidates

    def sampling(self) -> str:
        """The rule that chose the rows, in words; empty when every op is shown."""
        if not self.sampled:
            return ""
        others, shown_others = self.candidates - self.bad, len(self.rows) - self.shown_bad
        if self.shown_bad < self.bad:
            how = f"{self.shown_bad} of its {self.bad} bad ops, evenly spread in time order"
        elif not shown_others:
            how = f"its {self.bad} bad ops, none of the {others} others"
        else:
            how = f"every bad op ({self.bad}), then {shown_others} of the {others} others, evenly spread in time order"
        return (
            f"{len(self.rows)} of {self.candidates} ops shown: {how}. "
            "The run's store holds every op's events (history.jsonl)."
        )


@dataclass(frozen=True, slots=True)
class CellFacts:
    """What the page knows of one cell, for its timeline."""

    events: Mapping[str, Sequence[Event]]  # op -> its events (watched ops)
    intents: Sequence[Sequence[LocalFacts]] = ()  # each logical action's ops, as history.jsonl's facts lines
    ledger: Ledger | None = None  # the provider's side; None: not kept
    provider: Source = "none"  # what the run kept of the provider's side
    held: Sequence[HeldOp] = ()
    breaking: Mapping[str, str] = field(default_factory=dict)  # op -> how it breaks a user's job's promise
    differing: Collection[str] = ()  # ops whose facts differ from the model's


@dataclass(frozen=True, slots=True)
class ActionFate:
    """What became of a logical action (all its ops): its outcome, and the facts it rests on, which
    `word` (for its row) and `said` (the whole story) put in words, for the rows shown only."""

    outcome: OpOutcome
    local: Sequence[LocalFacts]
    effects: int | None = None  # at the provider; None: not known
    withdrawn: int = 0
    held: tuple[str, str] = ("", "")  # its state (unresolved, conflict) and why
    done: bool = False  # the job reported it done

    @property
    def word(self) -> str:
        if self.outcome == "duplicated" and self.effects is not None:
            return f"duplicated: {self.effects} effects"
        if self.outcome == "missing":
            return "missing, reported done" if self.done and self.effects is not None else "missing"
        if self.outcome == "held":
            return f"held: {self.held[0]}"
        return OUTCOMES[self.outcome]

    @property
    def said(self) -> str:
        state, why = self.held
        held = f"held {state}: {why}".rstrip(": ") if state else ""
        gone = f" ({self.withdrawn} withdrawn)" if self.withdrawn else ""
        job = [
            f"{f.op}: {f.attempts} attempt(s)" + (", RQ gave up on its job" if f.job_failed else "") for f in self.local
        ]
        if self.effects is None:
            known = {
                "duplicated": "duplicated (the run's verdict; the provider's records were not kept)",
                "missing": "missing (the run's verdict; the provider's records were not kept)",
                "unknown": "the run kept no record of the provider's side",
            }
            return _words(known.get(self.outcome, ""), held, *job)
        story = {
            "duplicated": f"duplicated: {self.effects} effects at the provider{gone}",
            "missing": "missing: no effect at the provider"
            + (", and the job reported it done (a false completion)" if self.done else ""),
            "held": f"{self.effects} effect(s) at the provider{gone}",
            "declined": f"{OUTCOMES['declined']}: it answered a permanent error",
            "once": f"{OUTCOMES['once']}: one effect at the provider{gone}",
        }
        first = [held, story["held"]] if self.outcome == "held" else [story.get(self.outcome, ""), held]
        return _words(*first, *job)


def fate_of(
    at_provider: Sequence[AtProvider | None],
    local: Sequence[LocalFacts],
    held: HeldOp | None = None,
    breach: str | None = None,
) -> ActionFate:
    """What became of a logical action (all its ops), from the provider's side where the run kept it."""
    state = (held.state, held.reason) if held else ("", "")
    if not held:
        stuck = next((f for f in local if f.outcome in HELD_OUTCOMES), None)
        if stuck is not None and stuck.outcome is not None:
            state = (stuck.outcome.value, stuck.detail)
    if not at_provider or any(a is None for a in at_provider):
        named: dict[str | None, OpOutcome] = {"duplicated": "duplicated", "missing": "missing"}
        return ActionFate(named.get(breach) or ("held" if state[0] else "unknown"), local, held=state)
    known = [a for a in at_provider if a is not None]
    effects = sum(a.effects for a in known)
    withdrawn = sum(a.withdrawn for a in known)
    done = any(f.outcome in LOCALLY_DONE for f in local)  # with no effect: the article's sign of silent loss
    outcome = classify(effects, any(a.declined for a in known), done, bool(state[0])).outcome
    return ActionFate(outcome, local, effects, withdrawn, state, done)


def _plainly_once(ops: Sequence[LocalFacts], logged: Mapping[str, AtProvider], held: Mapping[str, HeldOp]) -> bool:
    """One op, one effect, no error, nothing held: an exactly-once action, known without judging it."""
    if len(ops) != 1:
        return False
    f = ops[0]
    found = logged.get(f.op)
    return (
        found is not None
        and found.effects == 1
        and not found.declined
        and f.op not in held
        and f.outcome not in HELD_OUTCOMES
    )


def _words(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def cell_timeline(cell: CellFacts, limit: int = ROWS) -> CellTimeline:
    """The cell's timeline: its faulted ops (and any other op whose outcome is bad or that the run
    names), bad ops first; at most `limit` rows, bad ones chosen first (see `CellTimeline.sampling`)."""
    intent_of: dict[str, Sequence[LocalFacts]] = {}
    for ops in cell.intents:
        for f in ops:
            intent_of[f.op] = ops
    held = {h.op: h for h in cell.held}
    breach = cell.breaking
    ledger = cell.ledger

    def at(op: str) -> AtProvider | None:
        return None if ledger is None else ledger.of(op)

    def verdict(op: str) -> ActionFate:
        ops = intent_of.get(op) or [_from_events(op, cell.events.get(op, ()))]
        name = next((h for h in (held.get(f.op) for f in ops) if h is not None), None)
        return fate_of([at(f.op) for f in ops], ops, name, breach.get(op))

    logged = ledger.ops if ledger is not None else {}
    # Each logical action once, under its first op; an op a fault struck stands for its own.
    candidates = {op: None for op, events in cell.events.items() if faulted(events)}
    named = [*held, *breach, *cell.differing]
    outcome: dict[str, ActionFate] = {}
    for op in [*candidates, *named]:
        outcome[op] = verdict(op)
    for ops in cell.intents:  # a bad op no fault struck (a long cell has many good ones: looked at quickly)
        first = ops[0].op
        if not _plainly_once(ops, logged, held) and not any(f.op in outcome for f in ops):
            judged = verdict(first)
            if judged.outcome in BAD:
                outcome[first] = judged
    named_set = set(named)
    bad = [op for op, j in outcome.items() if j.outcome in BAD or op in named_set]
    bad_set = set(bad)
    good = [op for op in outcome if op not in bad_set]
    window = _window(cell.events)
    zero, last = _extent(window, ledger)
    when = {op: _first(cell.events.get(op, ()), at(op), window, zero) for op in outcome}
    rank = {name: i for i, name in enumerate(OUTCOMES)}
    bad.sort(key=lambda op: (when[op], op))
    good.sort(key=lambda op: (when[op], op))
    shown_bad = spread(bad, limit)
    shown = shown_bad + spread(good, limit - len(shown_bad))
    shown.sort(key=lambda op: (op not in bad_set, rank[outcome[op].outcome], when[op], op))
    rows = []
    for op in shown:
        ops = intent_of.get(op) or ()
        effects = _effects(op, ops, at, cell.events, window)
        rows.append(op_row(op, cell.events.get(op, ()), zero, effects, outcome[op]))
    anchor = Anchor("the cell's start", zero)
    end = max([last, *(_row_end(r) for r in rows)], default=0.0)
    tally = {name: n for name in OUTCOMES if (n := sum(j.outcome == name for j in outcome.values()))}
    return CellTimeline(anchor, end, rows, len(outcome), len(bad), len(shown_bad), cell.provider, tally)


def op_timeline(events: Sequence[Event]) -> CellTimeline:
    """One op's own chart, from its events alone, 0 at its first event."""
    zero = min((e.at for e in events), default=0.0)
    op = str(events[0].get("op", "")) if events else ""
    row = op_row(op, events, zero, [], None)
    anchor = Anchor("the op's first event", zero)
    return CellTimeline(anchor, _row_end(row), [row], 1, 0, 0, "none")


def op_row(
    op: str,
    events: Sequence[Event],
    zero: float,
    effects: Sequence[tuple[str, Effect, float, bool]],
    judged: ActionFate | None,
) -> OpRow:
    """An op's row: its events as bars, marks and spans, and the provider's effects
    (`effects`: the op that made each, the effect, its time on the lab's clock and whether that is
    the provider's own, see `_effects`)."""
    ordered = sorted(events, key=lambda e: e.at)
    row = OpRow(op, judged, events=list(ordered))
    bars = row.bars

    def ms(at: float) -> float:
        return (at - zero) * 1000

    def bar_of(attempt: int | None, pids: Iterable[int | None]) -> int | None:
        wanted = set(pids)
        same = [i for i, b in enumerate(bars) if b.attempt == attempt]
        return next((i for i in same if bars[i].pid in wanted), same[-1] if same else None)

    cuts: dict[str, int] = {}  # host -> its open span
    withdrawn = any(effect.withdrawn_at is not None for _, effect, _, _ in effects)
    for e in ordered:
        kind, t, n = e.event, ms(e.at), e.get("attempt")
        if kind == "attempt-start":
            bars.append(Bar(n or 0, str(e.get("worker", "")), e.get("pid"), t))
            queued = e.get("enqueuedAt")
            if n and n > 1 and queued is not None:
                wait = f"attempt {n} enqueued at {ms(queued):,.1f} ms, waited {t - ms(queued):,.1f} ms in the queue"
                row.spans.append(Span("attempt", ms(queued), t, "queued", wait, len(bars) - 1))
        elif kind == "attempt-end":
            i = bar_of(n, [e.get("pid")])
            if i is not None and bars[i].end is None:
                bars[i].end, bars[i].how, bars[i].outcome = t, "ended", str(e.get("outcome", ""))
                last = e.get("detail") or e.get("error")
                if last:
                    bars[i].said.append(str(last))
        elif kind == "contact":
            i = bar_of(n, [e.get("pid")])
            if i is not None:
                bars[i].said.append(f"the provider answered {e.get('answer')}")
        elif kind == "killed":
            row.marks.append(_killed(e, t, bars, bar_of, row))
        elif kind == "hit":
            said = f"attempt {n} reached {e.get('boundary')}, where {e.get('fault')} was armed"
            row.marks.append(Mark("lab", t, "hit", said))
        elif kind == "partitioned":
            host, worker = e.get("host", "?"), e.get("worker", "?")
            said = f"{host}, the host of {worker}, cut off from the provider at {e.get('boundary')}"
            cuts[str(host)] = len(row.spans)
            row.spans.append(Span("attempt", t, None, "cut", said, bar_of(n, [])))
        elif kind == "healed":
            i = cuts.pop(str(e.get("host", "?")), None)
            if i is not None:
                cut = row.spans[i]
                row.spans[i] = Span(
                    cut.track, cut.start, t, cut.kind, f"{cut.detail}; reconnected at {t:,.1f} ms", cut.bar
                )
        elif kind == "call-timeout":
            row.marks.append(
                Mark(
                    "attempt",
                    t,
                    "timeout",
                    f"attempt {n}: the call to the provider timed out",
                    bar_of(n, [e.get("pid")]),
                )
            )
        elif kind == "worker-restarted":
            row.marks.append(Mark("lab", t, "restart", f"{e.get('fresh')} started in place of {e.get('dead')}"))
        elif kind == "recovered":
            row.marks.append(Mark("lab", t, "requeue", f"the job requeued by {e.get('mode')} recovery"))
        elif kind == "nemesis":
            action = str(e.get("action", ""))
            if action == "withdraw" and withdrawn:
                continue  # the log's own withdrawal is drawn, at the time the provider made it
            track: Track = "provider" if action in _AT_PROVIDER else "lab"
            row.marks.append(Mark(track, t, "nemesis", f"the scenario: {action}"))
    for k, (made_by, effect, t, own) in enumerate(effects, 1):
        said = f"effect {k} of {len(effects)} applied by the provider at {ms(t):,.1f} ms"
        if not own:
            said = f"effect {k} of {len(effects)} applied by the provider on a clock the scenario had moved on"
            said += " (drawn where its attempt next showed)"
        if effect.attempt is not None:
            said += f", by attempt {effect.attempt}'s request"
        if made_by != op:
            said += f" for {made_by} (the same logical action under another identity)"
        row.marks.append(Mark("provider", ms(t), "effect", said))
        if effect.withdrawn_at is not None:
            gone = ms(t + effect.withdrawn_at - effect.at)  # on the same clock as its effect
            row.marks.append(Mark("provider", gone, "withdrawn", f"effect {k} withdrawn at {gone:,.1f} ms"))
    _stack(bars)
    return row


def _killed(
    e: Event, t: float, bars: list[Bar], bar_of: Callable[[int | None, list[Any]], int | None], row: OpRow
) -> Mark:
    n, boundary = e.get("attempt"), e.get("boundary")
    if e.get("provider") is not None:  # provider-crash: the provider died holding the request
        pid = e.get("provider")
        if e.get("shared"):
            return Mark(
                "provider",
                t,
                "provider-kill",
                f"the provider (pid {pid}) died holding attempt {n}'s request, in the crash of another op's request",
            )
        back = e.get("restartedMs")
        said = f"the provider (pid {pid}) SIGKILLed holding attempt {n}'s request at {boundary}"
        said += f", confirmed gone in {e.get('confirmedMs')} ms"
        if back is not None:
            row.spans.append(
                Span(
                    "provider", t, t + float(back), "provider-down", f"the provider down, back on its log in {back} ms"
                )
            )
        return Mark("provider", t, "provider-kill", said)
    pids = list(e.get("pids", []))
    i = bar_of(n, pids)
    if i is not None and bars[i].end is None:
        bars[i].end, bars[i].how = t, "killed"
    whole = len(pids) > 1
    what = "worker and work-horse" if whole else "work-horse"
    where = f" on {e.get('host')}" if e.get("host") is not None else ""
    said = f"SIGKILL at {boundary}: the {what} of {e.get('worker')}{where} (pid {', '.join(map(str, pids))})"
    said += f", confirmed gone in {e.get('confirmedMs')} ms"
    return Mark("attempt", t, "kill-worker" if whole else "kill", said, i)


def _stack(bars: list[Bar]) -> None:
    """Overlapping attempts of one op (a duplicate job) one above the other."""
    ends: list[float] = []
    for bar in sorted(bars, key=lambda b: b.start):
        free = next((k for k, end in enumerate(ends) if end <= bar.start), None)
        if free is None:
            free = len(ends)
            ends.append(0.0)
        ends[free] = float("inf") if bar.end is None else bar.end
        bar.slot = free


def _from_events(op: str, events: Sequence[Event]) -> LocalFacts:
    """An op's local facts where the run kept no facts line (older runs): from its last attempt's end."""
    ends = [e for e in events if e.event == "attempt-end"]
    starts = sum(e.event == "attempt-start" for e in events)
    last = max(ends, key=lambda e: e.at) if ends else None
    said = "" if last is None else str(last.get("outcome", ""))
    outcome = Outcome(said) if said in {o.value for o in Outcome} else None
    detail = "" if last is None else str(last.get("detail") or "")
    return LocalFacts.model_validate(
        {"op": op, "attempts": starts, "outcome": outcome, "detail": detail, "jobFailed": False}
    )


# What an attempt does after the provider applied its effect: the first of these follows the effect.
_AFTER_EFFECT = frozenset({"contact", "attempt-end", "killed", "call-timeout"})
_AFTER_EFFECT_HITS = frozenset({"after-effect", "after-receipt", "after-record"})


@dataclass(frozen=True, slots=True)
class Window:
    """The cell's span on the lab's clock (seconds since the epoch), from its events."""

    first: float
    last: float

    def holds(self, at: float) -> bool:
        return self.first - _SLACK <= at <= self.last + _SLACK


def _on_lab_clock(effect: Effect, events: Sequence[Event], window: Window | None) -> tuple[float, bool] | None:
    """An effect's time on the lab's clock, and whether it is the provider's own. The key-expired
    scenario moves a ledger's clock forward (a day at each fault): an effect applied after such a
    move is drawn where its attempt next showed (its answer, its end or its kill); None where
    that is not known."""
    if window is None or window.holds(effect.at):
        return effect.at, True
    after = [
        e.at
        for e in events
        if e.get("attempt") == effect.attempt
        and (e.event in _AFTER_EFFECT or (e.event == "hit" and e.get("boundary") in _AFTER_EFFECT_HITS))
    ]
    return (min(after), False) if after else None


def _effects(
    op: str,
    intent: Sequence[LocalFacts],
    at: Callable[[str], AtProvider | None],
    events: Mapping[str, Sequence[Event]],
    window: Window | None,
) -> list[tuple[str, Effect, float, bool]]:
    """The effects of the op's logical action: each with the op that made it, its time on the lab's
    clock and whether that is the provider's own time (see `_on_lab_clock`)."""
    out = []
    for made_by in dict.fromkeys([op, *(f.op for f in intent)]):
        found = at(made_by)
        for effect in (found.times or ()) if found is not None else ():
            placed = _on_lab_clock(effect, events.get(made_by, ()), window)
            if placed is not None:
                out.append((made_by, effect, *placed))
    return sorted(out, key=lambda item: item[2])


def _window(events: Mapping[str, Sequence[Event]]) -> Window | None:
    times = [e.at for evs in events.values() for e in evs]
    times += [e.get("enqueuedAt") for evs in events.values() for e in evs if e.get("enqueuedAt") is not None]
    return Window(min(times), max(times)) if times else None


def _extent(window: Window | None, ledger: Ledger | None) -> tuple[float, float]:
    """The cell's 0 (its first recorded moment, seconds since the epoch) and its last (ms from 0):
    its events' span, and its effects on the lab's clock (of a cell with no events, all of them)."""
    times = [] if window is None else [window.first, window.last]
    for found in ledger.ops.values() if ledger is not None else ():
        for effect in found.times or ():
            if window is None or window.holds(effect.at):
                times.append(effect.at)
    if not times:
        return 0.0, 0.0
    return min(times), (max(times) - min(times)) * 1000


def _first(events: Sequence[Event], found: AtProvider | None, window: Window | None, zero: float) -> float:
    """When an op first shows on the axis: its first event, else its first effect."""
    if events:
        return float(min(e.at for e in events))
    times = [e.at for e in (found.times or ()) if window is None or window.holds(e.at)] if found else []
    return min(times, default=zero)


def _row_end(row: OpRow) -> float:
    times = [0.0, *(m.at for m in row.marks)]
    times += [t for b in row.bars for t in (b.start, b.end) if t is not None]
    times += [t for s in row.spans for t in (s.start, s.end) if t is not None]
    return max(times)


def spread(items: Sequence[T], k: int) -> list[T]:
    """k of the items, evenly spread over them (all of them when they are no more than k)."""
    if k <= 0:
        return []
    if len(items) <= k:
        return list(items)
    return [items[(i * len(items)) // k] for i in range(k)]
