"""Replay timelines: each killed op's attempts, as the run saw them (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from labcore.events import EventKind, Noted
from testbed.judge.observer import parse_history, replay_latency


def _line(event: Noted, t0: float) -> str | None:
    kind, d = event.kind, event.data
    stamp = f"{(event.at - t0) * 1000:+10.1f} ms  "
    n = d.get("attempt")
    if kind is EventKind.ATTEMPT_START:
        requeued = d.get("enqueuedAt")
        since = f", enqueued at {(requeued - t0) * 1000:+.1f} ms" if requeued and n and n > 1 else ""
        return f"{stamp}attempt {n} started by {d['worker']} (pid {d['pid']}){since}"
    if kind is EventKind.KILLED and "provider" in d:
        if d.get("shared"):
            return f"{stamp}the provider (pid {d['provider']}) died holding it, in the crash of another op's request"
        return (
            f"{stamp}provider (pid {d['provider']}) killed at {d['boundary']}, confirmed gone in"
            f" {d['confirmedMs']} ms, back on its log in {d['restartedMs']} ms"
        )
    if kind is EventKind.KILLED:
        pids = ", ".join(map(str, d["pids"]))
        what = "worker and work-horse" if len(d["pids"]) > 1 else "work-horse"
        return (
            f"{stamp}killed at {d['boundary']}: {what} of {d['worker']} (pid {pids}),"
            f" confirmed gone in {d['confirmedMs']} ms"
        )
    if kind is EventKind.PARTITIONED:
        return (
            f"{stamp}{d['host']}, the host of {d['worker']}, cut off from the provider at {d['boundary']}"
            f" (in place in {d['confirmedMs']} ms); the held request let go into the cut"
        )
    if kind is EventKind.HEALED:
        return f"{stamp}{d['host']} reconnected to the provider (in {d['confirmedMs']} ms)"
    if kind is EventKind.WORKER_RESTARTED:
        return f"{stamp}{d['fresh']} started in place of {d['dead']}"
    if kind is EventKind.RECOVERED:
        return f"{stamp}requeued by {d['mode']} recovery (RQ's started-registry cleanup)"
    if kind is EventKind.NEMESIS:
        return f"{stamp}nemesis: {d['action']}"
    if kind is EventKind.CALL_TIMEOUT:
        return f"{stamp}attempt {n}: provider call timed out"
    if kind is EventKind.ATTEMPT_END:
        detail = d.get("detail") or d.get("error") or ""
        return f"{stamp}attempt {n} ended: {d['outcome']}" + (f" ({detail})" if detail else "")
    return None  # hits and first answers are in results.json; the timeline shows what a reader follows


def render(history: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """One block per op that was killed or cut off, events in time order, times from its first event."""
    blocks = []
    for op, events in parse_history(history).items():
        if not any(e.kind in (EventKind.KILLED, EventKind.PARTITIONED) for e in events):
            continue
        ordered = sorted(events, key=lambda e: e.at)
        latency = replay_latency(ordered)
        replayed = None if latency is None else latency.replay_ms
        lines = [op + ("" if replayed is None else f"  (replayed {replayed:.1f} ms after the kill)")]
        lines += [line for e in ordered if (line := _line(e, ordered[0].at)) is not None]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def summary(stats: Mapping[str, float] | None, kills: int) -> str:
    if not stats:
        return f"{kills} kill(s), no replay observed"
    parts = " / ".join(f"{stats[k]:.1f}" for k in ("min", "median", "p99", "max"))
    return f"{kills} kill(s); kill-to-replay latency min / median / p99 / max: {parts} ms"
