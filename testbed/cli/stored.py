"""The commands over what runs left: stored runs (runs, report, check, compare)
and leftovers of runs that died (clean)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from typer import Argument, Option

from testbed.cli import checks
from testbed.cli.base import EXIT_UNCONFIRMED, app, examples
from testbed.cli.options import Expect
from testbed.cli.output import write_report
from testbed.store.layout import DESTINATION_RECORDS, REPORT
from testbed.store.runs import RunStore

if TYPE_CHECKING:
    from testbed.store.results import Results

StoreDir = Annotated[Path, Option("--store", metavar="DIR", help="The run store.")]
RunName = Annotated[str, Argument(metavar="RUN", help="A stored run: its id, latest, or its directory.")]


def _stored(store: Path, name: str) -> tuple[Path, Results]:
    """A stored run and its results, once every file of it is found as its schema says
    (exit 2, one line naming the damaged file, where one is not; exit 3 for a run killed
    before its end)."""
    from testbed.store.runs import check_stored

    run = RunStore(store).resolve(name)
    return run, check_stored(run)


@app.command(short_help="List the stored runs.", epilog=examples("testbed runs", "testbed runs --store ci-runs"))
def runs(store: StoreDir = Path("runs")) -> int:
    """List the stored runs: id, command, when, cells, verdict, size on disk."""
    found = list(RunStore(store).runs())
    if not found:
        print(f"no stored runs in {store}")
        return 0
    from testbed.report import tables

    grid = [["run", "command", "started", "cells", "verdict", "size"]]
    grid += [[r.id, r.command, r.started, str(r.cells), r.verdict, f"{r.bytes / 1e6:.1f} MB"] for r in found]
    print("\n".join(tables.aligned(grid)))
    return 0


@app.command(
    short_help="Write a stored run's report.html.",
    epilog=examples("testbed report", "testbed report 20261130-101500-1a2b3c"),
)
def report(run: RunName = "latest", store: StoreDir = Path("runs")) -> int:
    """Write a stored run's report.html (self-contained: opens from disk, no network) and print its path."""
    path, _ = _stored(store, run)
    checks.output_file("report", path / REPORT)
    print(write_report(path))
    return 0


@app.command(
    short_help="Judge a stored run again, offline, from its history and provider log.",
    epilog=examples(
        "testbed check                                   # the latest run, its verdict again",
        "testbed check latest --expect retry-only@after-effect:kill=100/0",
    ),
)
def check(
    run: RunName = "latest",
    store: StoreDir = Path("runs"),
    expect: Expect = None,
    junit_path: Annotated[Path | None, Option("--junit", metavar="PATH", help="Also write JUnit XML here.")] = None,
) -> int:
    """Judge a stored run again from its history and provider log alone (no Redis, no workers): the same
    verdict and exit code as the run, or the verdict under other expectations. A run whose files do not
    match their schemas is refused first (exit 2); a run the lab could not finish is judged as far as it
    went, and said to be incomplete (exit 3)."""
    from testbed.experiment.selection import parse_expect
    from testbed.report import findings
    from testbed.store.recheck import recheck, stored_cells

    path, results = _stored(store, run)
    if junit_path is not None:
        checks.output_file("--junit", junit_path)
    overrides = parse_expect(expect, stored_cells(results)) if expect else None
    rows = recheck(path, results, overrides)
    judged = results.judged_again(rows)
    print(findings.words(judged.rows))
    if junit_path is not None:
        from testbed.report import junit

        junit.write_junit(junit_path, judged)
    passed = sum(r.passed for r in rows)
    if results.incomplete:
        counted = f"{passed}/{len(rows)} judged cell(s) as expected, {len(results.not_run)} not run"
        print(f"incomplete run: {results.failure or 'a part of the lab failed'}; {counted}, checked from {path}")
        return 3
    if results.options.destination is not None:
        print(
            f"the effects counted from what {results.options.destination.url} held for each op, as its evidence"
            f" reader answered in the run ({DESTINATION_RECORDS})"
        )
    print(f"{passed}/{len(rows)} cells as expected, checked from {path} (the run said: {results.verdict})")
    if results.explore is not None:
        from testbed.explore.trials import found_in, sought

        # As the search judged its trials: a breach it did not seek (--model-only) is no counterexample.
        if not any(sought(found_in(row), bool(results.options.model_only)) for row in rows):
            return 0
    elif passed == len(rows):
        return 0
    found = results.explore.counterexample if results.explore is not None else None
    # An exploration whose counterexample did not reproduce exited 4, not 1: the same code again.
    return EXIT_UNCONFIRMED if found is not None and not found.confirmed else 1


@app.command(
    short_help="The cells that differ between two stored runs.",
    epilog=examples("testbed compare 20261129-090000-aaaaaa latest"),
)
def compare(
    run_a: Annotated[str, Argument(metavar="RUN_A", help="A stored run (id, latest, or directory).")],
    run_b: Annotated[str, Argument(metavar="RUN_B", help="Another stored run.")],
    store: StoreDir = Path("runs"),
) -> int:
    """Print the cells whose counts or verdicts differ between two stored runs, and their latency changes.
    Exits 0 when every cell matches, 1 when any differs or is in one run only (as diff does)."""
    from testbed.report import compare as comparing

    (a_path, a), (b_path, b) = _stored(store, run_a), _stored(store, run_b)
    changes = comparing.compare(a, b)
    print(comparing.render_text(changes, a_path.name, b_path.name, comparing.in_common(a, b)))
    return 1 if changes else 0


@app.command(
    short_help="Remove what runs that died left behind (temp dirs; their keys on a shared Redis).",
    epilog=examples("testbed clean", "testbed clean --redis-url redis://:secret@redis.internal:6379/0"),
)
def clean(
    redis_url: Annotated[
        str | None,
        Option(
            "--redis-url",
            metavar="URL",
            envvar="REDIS_URL",
            help="Also remove the keys of dead runs from this (shared) Redis.",
        ),
    ] = None,
) -> int:
    """Remove the leftovers of runs whose testbed process is gone: their temp dirs (kept ones too) and,
    on a shared Redis, their keys. A live run's are never touched."""
    from labcore.credentials import redacted
    from testbed.infra import leftovers
    from testbed.infra.stack import connect

    for path in leftovers.remove_stale_dirs(kept=True):
        print(f"removed {path}")
    if redis_url:
        redis = connect(redis_url)
        dead = leftovers.ownerless_runs(redis)
        for prefix, count in sorted(dead.items()):
            leftovers.delete_keys(redis, f"{prefix}:*")
            print(f"removed {count} key(s) under {prefix}: from {redacted(redis_url)}")
    print("clean")
    return 0
