"""The command line: validates input, then hands over to the runner.

Exit codes: 0 every cell as expected; 1 a cell differs from its expectation;
2 bad input or an environment the run cannot start in; 3 the stack failed
during the run; 130 interrupted.
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from typer import Option

from testbed.boundaries import Boundary, boundary_label, parse_boundary
from testbed.errors import Interrupted, RunFailure, SetupError, UsageError
from testbed.faults import RULES, Fault, parse_fault
from testbed.keys import new_run_id, rq_prefix, run_prefix
from testbed.matrix import Cell, full, grid
from testbed.procs import port_in_use
from testbed.scenarios import parse_scenario
from workers.strategies import ARTICLE_STRATEGIES, parse_strategy

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="A crash-test lab for the side effects of agent tool calls and queue jobs.",
)

_VERSIONED = ("rq", "redis", "psutil", "typer", "fastapi", "uvicorn", "httpx")


def _usage(message: str) -> NoReturn:
    raise UsageError(message)


def _parse_all(values: list[str] | None, parse: Any) -> list[Any] | None:
    if not values:
        return None
    try:
        return [parse(v) for v in values]
    except ValueError as exc:
        _usage(str(exc))


def select_cells(
    matrix: str,
    strategies: list[str] | None,
    boundaries: list[Boundary | None] | None,
    faults: list[Fault] | None,
    scenarios: list[str] | None,
) -> list[Cell]:
    """The chosen matrix, narrowed to the strategies/boundaries/faults/scenarios given."""
    if matrix == "full":
        cells = full()
    elif matrix == "article":
        cells = grid(
            strategies or ARTICLE_STRATEGIES,
            boundaries or (None, Boundary.BEFORE_EFFECT, Boundary.AFTER_EFFECT),
            faults or (Fault.KILL,),
            scenarios or ("none",),
        )
    else:
        _usage(f"unknown matrix {matrix!r} (choose from article, full)")
    for fault in faults or ():
        allowed = [b for b in boundaries or () if b is None or b in RULES[fault].boundaries]
        if boundaries and not allowed:
            where = ", ".join(RULES[fault].boundaries)
            _usage(
                f"fault {fault} cannot be injected at {', '.join(map(boundary_label, boundaries))} (only at {where})"
            )
    cells = [
        c
        for c in cells
        if (strategies is None or c.strategy in strategies)
        and (boundaries is None or c.boundary in boundaries)
        and (faults is None or c.boundary is None or c.fault in faults)
        and (scenarios is None or c.scenario in scenarios)
    ]
    if not cells:
        _usage("that selection leaves no cell to run")
    return cells


def parse_expect(values: list[str] | None) -> dict[tuple[str, str], dict[str, int]]:
    """`STRATEGY@BOUNDARY=EFFECTS/MISSING`: the user's own expectation for a cell."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for value in values or ():
        try:
            where, numbers = value.split("=", 1)
            strategy, boundary = where.split("@", 1)
            effects, missing = (int(n) for n in numbers.split("/", 1))
            parse_strategy(strategy)
            parse_boundary(boundary)
        except ValueError as exc:
            detail = str(exc) if "unknown" in str(exc) else "expected STRATEGY@BOUNDARY=EFFECTS/MISSING"
            _usage(f"bad --expect {value!r}: {detail}")
        out[(strategy, boundary)] = {"effects": effects, "missing_operations": missing}
    return out


def _positive(name: str, value: float, minimum: float = 1) -> None:
    if value < minimum:
        _usage(f"{name} must be at least {minimum:g} (got {value:g})")


@app.command()
def chaos(
    strategy: Annotated[list[str] | None, Option("--strategy", "-s", help="Strategy to run (repeatable).")] = None,
    boundary: Annotated[list[str] | None, Option("--boundary", "-b", help="Boundary, or none (repeatable).")] = None,
    fault: Annotated[list[str] | None, Option("--fault", "-f", help="kill, kill-worker, timeout, late.")] = None,
    scenario: Annotated[list[str] | None, Option("--scenario", help="Provider scenario (repeatable).")] = None,
    matrix: Annotated[str, Option("--matrix", help="article (12 cells) or full (every meaningful cell).")] = "article",
    ops: Annotated[int, Option("--ops", help="Operations per cell.")] = 100,
    every: Annotated[int, Option("--every", help="Fault the first attempt of every N-th op.")] = 10,
    workers: Annotated[int, Option("--workers", help="RQ worker processes.")] = 4,
    parallel: Annotated[int, Option("--parallel", help="Cells in flight at once.")] = 2,
    retries: Annotated[int, Option("--retries", help="RQ Retry(max=N) per job.")] = 1,
    seed: Annotated[int, Option("--seed", help="Seed for payloads and random plans.")] = 0,
    json_path: Annotated[Path, Option("--json", help="Where to write the results.")] = Path("results.json"),
    redis_url: Annotated[
        str | None, Option("--redis-url", envvar="REDIS_URL", help="Use this Redis (the run keeps to its own prefix).")
    ] = None,
    provider_port: Annotated[int, Option("--provider-port", help="Provider port (default: a free one).")] = 0,
    client_timeout: Annotated[
        float, Option("--client-timeout", help="Seconds before a provider call times out.")
    ] = 0.5,
    expect: Annotated[list[str] | None, Option("--expect", help="Own expectation: STRATEGY@BOUNDARY=E/M.")] = None,
    cell_timeout: Annotated[float, Option("--cell-timeout", help="Give up on a cell after this many seconds.")] = 120.0,
    keep: Annotated[bool, Option("--keep", help="Keep the temp dir (and the keys on a shared Redis).")] = False,
) -> int:
    """Run the crash matrix on real Redis, RQ workers and a provider process, and check every cell."""
    cells = select_cells(
        matrix,
        _parse_all(strategy, lambda s: parse_strategy(s).name),
        _parse_all(boundary, parse_boundary),
        _parse_all(fault, parse_fault),
        _parse_all(scenario, lambda s: parse_scenario(s).name),
    )
    _positive("--ops", ops)
    _positive("--every", every)
    _positive("--workers", workers)
    _positive("--parallel", parallel)
    _positive("--retries", retries, 0)
    _positive("--client-timeout", client_timeout, 0.05)
    _positive("--cell-timeout", cell_timeout)
    if provider_port < 0 or provider_port > 65535:
        _usage(f"--provider-port must be a port number (got {provider_port})")
    if provider_port and port_in_use(provider_port):
        raise SetupError(f"provider port {provider_port} is already in use")
    overrides = parse_expect(expect)

    run_id = new_run_id()
    prefix = run_prefix(run_id)
    os.environ["RQ_KEY_PREFIX"] = rq_prefix(prefix)  # before anything imports rq
    from testbed.stack import Stack, StackOptions

    stack_options = StackOptions(workers=workers, redis_url=redis_url, provider_port=provider_port, keep=keep)
    started = time.time()
    try:
        with Stack(run_id, stack_options) as stack:
            # rq is imported while the workers and the provider boot.
            from testbed import report, runner

            runner.check_rq_prefix(rq_prefix(prefix))
            options = runner.RunOptions(
                cells=cells,
                ops=ops,
                every=every,
                retries=retries,
                seed=seed,
                client_timeout=client_timeout,
                cell_timeout=cell_timeout,
                parallel=parallel,
                overrides=overrides,
            )
            stack.wait_ready()
            print(f"testbed run {run_id}: {len(cells)} cells, {ops} ops each, {workers} workers", file=sys.stderr)
            rows = runner.run_cells(stack, options)
            versions = _versions(stack.redis)
            if keep:
                print(f"kept {stack.workdir}", file=sys.stderr)
    except KeyboardInterrupt:
        raise Interrupted from None
    wall = time.time() - started
    plural = "retry" if retries == 1 else "retries"
    note = f"{ops} ops per cell, first attempt of every {every}th op faulted, {retries} {plural}"
    print(report.tables(rows, note))
    diffs = report.differences(rows)
    if diffs:
        print("\n" + diffs)
    print(f"\n{report.LEGEND}")
    passed = sum(r.passed for r in rows)
    meta = {
        "testbed": _version("testbed"),
        "run": run_id,
        "startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "wallSeconds": round(wall, 3),
        "seed": seed,
        "options": {
            "matrix": matrix,
            "ops": ops,
            "every": every,
            "workers": workers,
            "parallel": parallel,
            "retries": retries,
            "clientTimeout": client_timeout,
            "redis": "shared" if redis_url else "private",
        },
        "versions": versions,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
    }
    report.write_results(json_path, meta, rows)
    print(f"{passed}/{len(rows)} cells as expected; wall {wall:.1f} s; results in {json_path}")
    return 0 if passed == len(rows) else 1


@app.command()
def provider(
    db: Annotated[Path, Option("--db", help="SQLite file of the effect log (created if missing).")],
    port: Annotated[int, Option("--port", help="Port to listen on.")] = 8080,
    host: Annotated[str, Option("--host", help="Interface to bind (loopback by default).")] = "127.0.0.1",
) -> int:
    """Run the provider on its own: an HTTP service with a durable effect log."""
    if port_in_use(port, host):
        raise SetupError(f"provider port {port} is already in use")
    if not db.parent.is_dir():
        raise SetupError(f"directory {db.parent} does not exist")
    from provider.server import serve

    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal.
    with contextlib.suppress(KeyboardInterrupt):
        serve(port, db, host=host)
    return 0


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"


def _versions(redis: Any) -> dict[str, str]:
    versions = {name: _version(name) for name in _VERSIONED}
    versions["python"] = platform.python_version()
    versions["redis-server"] = str(redis.info("server").get("redis_version", "unknown"))
    return versions


def _fail(message: str, code: int) -> NoReturn:
    print(f"testbed: error: {message}", file=sys.stderr)
    sys.exit(code)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, _interrupt)
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="testbed", standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (Interrupted, KeyboardInterrupt, typer.Abort):
        _fail("interrupted; everything the run started has been stopped", 130)
    except typer.TyperException as exc:  # the parser's own usage errors
        _fail(exc.format_message().replace("\n", " "), exc.exit_code)
    except SetupError as exc:
        _fail(str(exc), 2)
    except RunFailure as exc:
        _fail(str(exc), 3)
    sys.exit(code if isinstance(code, int) else 0)
