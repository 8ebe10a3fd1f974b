"""One run of the lab, whatever command asked for it: the stack up, the cells
run, the stack down, and the metadata results.json carries."""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from labcore.keys import new_run_id, rq_prefix, run_prefix
from testbed.errors import Interrupted, RunFailure
from testbed.infra.stack import StackOptions, open_stack
from testbed.lab.store import RunDir, RunStore

if TYPE_CHECKING:
    from testbed.judge.scorecard import Row
    from testbed.lab.runner import Progress, RunOptions

_VERSIONED = ("testbed", "rq", "redis", "psutil", "typer", "fastapi", "uvicorn", "httpx")


@dataclass(frozen=True, slots=True)
class Session:
    run_id: str
    rows: list[Row]
    started: float
    wall: float
    versions: dict[str, str]
    # Set when a part of the stack failed: the rows are those judged before it.
    failure: str | None = None
    not_run: list[str] = field(default_factory=list)
    stored: RunDir | None = None

    def meta(self, options: dict[str, Any], seed: int) -> dict[str, Any]:
        incomplete = {"incomplete": True, "failure": self.failure, "notRun": self.not_run} if self.failure else {}
        return incomplete | {
            "testbed": self.versions["testbed"],
            "run": self.run_id,
            "startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "wallSeconds": round(self.wall, 3),
            "seed": seed,
            "options": options,
            "versions": self.versions,
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        }


def execute(
    stack_options: StackOptions,
    make_options: Callable[[], RunOptions],
    judged: Callable[[int, int, Row], None],
    tick: Callable[[list[Progress]], None] | None = None,
    store: RunStore | None = None,
) -> Session:
    """Start the stack, run the cells, stop everything. `make_options` is called
    once rq may be imported (its key prefix is set per run, before the import).
    With a store, the run's history, provider log and process logs are kept there."""
    run_id = new_run_id()
    os.environ["RQ_KEY_PREFIX"] = rq_prefix(run_prefix(run_id))
    started = time.time()
    run_dir = store.create(run_id) if store is not None else None
    try:
        with open_stack(run_id, stack_options) as stack:
            # rq is imported while the workers and the provider boot.
            from testbed.lab import runner

            runner.check_rq_prefix(os.environ["RQ_KEY_PREFIX"])
            options = make_options()
            stack.wait_ready()
            cells = len(options.cells)
            print(
                f"testbed run {run_id}: {cells} cell(s), {options.ops} ops each, {stack_options.workers} workers",
                file=sys.stderr,
            )
            cells_runner = runner.CellRunner(stack, options, judged, tick, run_dir)
            failure = None
            try:
                rows = cells_runner.run(options.cells)
            except RunFailure as exc:
                failure = str(exc)
                rows = [cells_runner.rows[i] for i in sorted(cells_runner.rows)]
            not_run = [c.label for i, c in enumerate(options.cells, 1) if i not in cells_runner.rows]
            versions = _versions(stack.redis)
            if run_dir is not None:
                run_dir.close()
                stack.stop_services()  # the provider's log is copied whole, once nothing writes to it
                if stack.provider.db is not None:  # a remote provider's records were kept as judged
                    run_dir.keep_provider_log(stack.provider.db)
                run_dir.keep_logs(stack.workdir)
            if stack_options.keep:
                print(f"kept {stack.workdir}", file=sys.stderr)
    except KeyboardInterrupt:
        if run_dir is not None:
            run_dir.discard()
        raise Interrupted from None
    wall = time.time() - started
    return Session(run_id, rows, started, wall, versions, failure, not_run if failure else [], run_dir)


def package_version(name: str) -> str:
    """The installed version of a distribution, or "unknown"."""
    # Imported here: importlib.metadata (with the email package) would come before a
    # run's launch, and only a run's end and --version ask for a version.
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"


def _versions(redis: Any) -> dict[str, str]:
    from redis.exceptions import RedisError  # imported by then: not at the command line's start

    versions = {name: package_version(name) for name in _VERSIONED}
    versions["python"] = platform.python_version()
    try:
        versions["redis-server"] = str(redis.info("server").get("redis_version", "unknown"))
    except RedisError:  # the run lost its Redis: say so elsewhere, not here
        versions["redis-server"] = "unknown"
    return versions
