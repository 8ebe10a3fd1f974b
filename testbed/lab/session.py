"""One run of the lab, whatever command asked for it: the stack up, the cells
run, the stack down, and the metadata results.json carries."""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from labcore.keys import new_run_id, rq_prefix, run_prefix
from testbed.errors import Interrupted
from testbed.infra.stack import Stack, StackOptions

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

    def meta(self, options: dict[str, Any], seed: int) -> dict[str, Any]:
        return {
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
    tick: Callable[[list[Progress]], None] | None = None,
) -> Session:
    """Start the stack, run the cells, stop everything. `make_options` is called
    once rq may be imported (its key prefix is set per run, before the import)."""
    run_id = new_run_id()
    os.environ["RQ_KEY_PREFIX"] = rq_prefix(run_prefix(run_id))
    started = time.time()
    try:
        with Stack(run_id, stack_options) as stack:
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
            rows = runner.run_cells(stack, options, tick=tick)
            versions = _versions(stack.redis)
            if stack_options.keep:
                print(f"kept {stack.workdir}", file=sys.stderr)
    except KeyboardInterrupt:
        raise Interrupted from None
    return Session(run_id, rows, started, time.time() - started, versions)


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
