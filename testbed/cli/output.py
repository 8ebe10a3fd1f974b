"""Where a command's run goes: results.json (in the stored run and at --json), JUnit XML, the
report page; the run itself on its own stack; and what the run found, in words."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.cli import checks
from testbed.cli.options import StoreArgs
from testbed.errors import RunFailure, UsageError
from testbed.store.files import replaced
from testbed.store.layout import REPORT, RESULTS
from testbed.store.runs import RunStore
from testbed.usecases.runs import PreparedRun, fit_stack

if TYPE_CHECKING:
    from testbed.lab.session import Session


@dataclass(frozen=True, slots=True)
class Output:
    """Where a run's results go, and what they say about the run besides its rows."""

    command: str
    json_path: Path
    meta: dict[str, Any]
    seed: int | None  # None: explore without --seed
    store: StoreArgs

    def check(self) -> None:
        """Every place the run will write, before it starts."""
        checks.output_file("--json", self.json_path)
        if self.store.junit is not None:
            checks.output_file("--junit", self.store.junit)
        if not self.store.no_store:
            RunStore(self.store.store).check_writable()
        elif self.store.report:
            raise UsageError("--report writes into the stored run: it needs the store (drop --no-store)")

    def document(self, ran: Any, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The run's results; `extra`: what a command adds of its own (explore's summary)."""
        from testbed.report import tables as report
        from testbed.store import results

        meta = self.meta | ({"peakRssMb": report.peak_rss_mb()} if self.command == "load" else {})
        return results.document({"command": self.command} | ran.meta(meta, self.seed), ran.rows) | (extra or {})

    def deliver(self, ran: Any, extra: dict[str, Any] | None = None, judged: Any = None) -> None:
        """What else the user asked for: JUnit XML, the report page; and where the run is kept.
        `judged`: the run's results as parsed already, if they were."""
        if self.store.junit is not None or self.store.report:
            from testbed.report import junit
            from testbed.store import results

            if self.store.junit is not None:
                junit.write_junit(self.store.junit, judged or results.parse(self.document(ran, extra)))
                print(f"JUnit XML in {self.store.junit}")
            if self.store.report and ran.stored is not None:
                print(f"report in {write_report(ran.stored.path)}")
        if ran.stored is not None:
            print(f"stored in {ran.stored.path}")

    def keep(self, ran: Session, store: RunStore | None, extra: dict[str, Any] | None = None) -> Session:
        """results.json where it can be written: the stored run's first (a store that fails then
        leaves the run incomplete, and --json says so), then --json; if neither, stdout. If a part
        of the stack failed, or a file could not be written, the failure ends the command (exit 3)
        once the cells judged before are written. The run as kept."""
        from testbed.store import results  # at the end: its records are built as it is imported
        from testbed.store.files import Unwritable

        stored, where = ran.stored, "stdout"
        if stored is not None and stored.broken is None:
            assert store is not None
            try:
                stored.keep_results(self.document(ran, extra))
                store.mark_latest(ran.run_id)
                where = str(stored.path / RESULTS)
            except Unwritable as exc:
                ran = replace(ran, failure=ran.failure or str(exc))
        document = self.document(ran, extra)
        failure = ran.failure
        try:
            results.write(self.json_path, document)
            where = str(self.json_path)
        except Unwritable as exc:
            if where == "stdout":
                print(results.text(document), end="")
            failure = "; ".join(filter(None, [ran.failure, str(exc)]))
        if failure:
            done = f"{len(ran.rows)} cell(s) judged, {len(ran.not_run)} not run, written to {where}"
            raise RunFailure(f"{failure} ({done})")
        return ran


def run(prepared: PreparedRun, out: Output, estimate: checks.Estimate, yes: bool) -> Session:
    """One run: the stack, the cells, the results. If a part of the stack failed, the cells
    judged before are written, marked incomplete, and the failure ends the command (exit 3)."""
    from testbed.lab import session
    from testbed.report.live import Live

    stack = fit_stack(prepared.stack, prepared.options.cells)
    out.check()
    if (note := estimate.confirm(yes)) is not None:
        print(f"testbed: {note}", file=sys.stderr)
    store = None if out.store.no_store else RunStore(out.store.store)
    with Live() as live:
        ran = session.execute(stack, prepared.options, live.judged, live.tick, store)
    return out.keep(ran, store)


def finish(ran: Any, out: Output) -> int:
    """What the run found, in words (the same as the report's and `testbed check`'s), the
    summary line, and what else the user asked for: JUnit XML, the report page."""
    from testbed.report import findings
    from testbed.store import results

    judged = results.parse(out.document(ran))
    print("\n" + findings.words(judged.rows))
    passed = sum(r.passed for r in ran.rows)
    total = len(ran.rows)
    print(f"{passed}/{total} cells as expected; wall {ran.wall:.1f} s; results in {out.json_path}")
    out.deliver(ran, judged=judged)
    return 0 if passed == total else 1


def write_report(run: Path) -> Path:
    from testbed.report import page

    with replaced(run / REPORT) as out:
        out.write(page.of_run(run).encode())
    return run / REPORT
