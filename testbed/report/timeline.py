"""Replay timelines: each killed op's attempts, as the controller saw them (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from testbed.report.latency import replay_latency


def _line(event: Mapping[str, Any], t0: float) -> str | None:
    kind, at = event["event"], event["at"]
    stamp = f"{(at - t0) * 1000:+10.1f} ms  "
    n = event.get("attempt")
    if kind == "attempt-start":
        requeued = event.get("enqueuedAt")
        since = f", enqueued at {(requeued - t0) * 1000:+.1f} ms" if requeued and n and n > 1 else ""
        return f"{stamp}attempt {n} started by {event['worker']} (pid {event['pid']}){since}"
    if kind == "killed":
        pids = ", ".join(map(str, event["pids"]))
        what = "worker and work-horse" if len(event["pids"]) > 1 else "work-horse"
        return (
            f"{stamp}killed at {event['boundary']}: {what} of {event['worker']} (pid {pids}),"
            f" confirmed gone in {event['confirmedMs']} ms"
        )
    if kind == "worker-restarted":
        return f"{stamp}{event['fresh']} started in place of {event['dead']}"
    if kind == "recovered":
        return f"{stamp}requeued by {event['mode']} recovery (RQ's started-registry cleanup)"
    if kind == "nemesis":
        return f"{stamp}nemesis: {event['action']}"
    if kind == "call-timeout":
        return f"{stamp}attempt {n}: provider call timed out"
    if kind == "attempt-end":
        detail = event.get("detail") or event.get("error") or ""
        return f"{stamp}attempt {n} ended: {event['outcome']}" + (f" ({detail})" if detail else "")
    return None  # hits and first answers are in results.json; the timeline shows what a reader follows


def render(history: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """One block per op that was killed, events in time order, times from its first event."""
    blocks = []
    for op, events in history.items():
        if not any(e["event"] == "killed" for e in events):
            continue
        ordered = sorted(events, key=lambda e: e["at"])
        t0 = ordered[0]["at"]
        spans = replay_latency(ordered)
        latency = None if spans is None else spans.replay_ms
        lines = [op + ("" if latency is None else f"  (replayed {latency:.1f} ms after the kill)")]
        lines += [line for e in ordered if (line := _line(e, t0)) is not None]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def summary(stats: Mapping[str, float] | None, kills: int) -> str:
    if not stats:
        return f"{kills} kill(s), no replay observed"
    parts = " / ".join(f"{stats[k]:.1f}" for k in ("min", "median", "p99", "max"))
    return f"{kills} kill(s); kill-to-replay latency min / median / p99 / max: {parts} ms"
