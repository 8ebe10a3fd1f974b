"""Helpers for end-to-end tests: run the real `testbed` command and watch every process it starts;
fork a child as RQ's worker forks a work-horse."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import redis

TESTBED = [sys.executable, "-m", "testbed"]

# The session's background runs (tests/conftest.py), by name: each run's process and its workdir.
BackgroundRuns = dict[str, tuple[subprocess.Popen[bytes], Path]]
# A Redis the user shares with other programs: its URL, and a client of it.
SharedRedis = tuple[str, redis.Redis]


@contextlib.contextmanager
def redis_server(directory: Path, password: str | None = None) -> Iterator[SharedRedis]:
    """A redis-server of the test's own on loopback, standing in for one the user shares with
    other programs: with a password, or taking every client as many do."""
    from labcore.procs import free_port
    from testbed.infra.redis_server import find_binary

    port = free_port()
    argv = [find_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    argv += ["--dir", str(directory), *(["--requirepass", password] if password else [])]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port, password=password)
    try:
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        yield f"redis://{f':{password}@' if password else ''}127.0.0.1:{port}/0", client
    finally:
        client.close()
        proc.terminate()
        proc.wait()


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str
    tmpdir: Path
    results: dict[str, Any] | None  # results.json as the run wrote it (JSON), None if it wrote none
    # (pid, create_time) of every process seen below the testbed process
    descendants: set[tuple[int, float]] = field(default_factory=set)

    @property
    def json(self) -> dict[str, Any]:
        """results.json, for a test that needs the run to have written it: fails with the run's stderr if not."""
        assert self.results is not None, self.stderr
        return self.results

    def row(self, strategy: str, boundary: str, **match: str) -> dict[str, Any]:
        row: dict[str, Any]
        for row in self.json["rows"]:
            if (
                row["strategy"] == strategy
                and row["boundary"] == boundary
                and all(row[k] == v for k, v in match.items())
            ):
                return row
        raise AssertionError(f"no row {strategy} @ {boundary} {match}")


# A run, and the workdir it ran in (a module's fixture, for its tests to read the stored run).
RanIn = tuple[Ran, Path]


def descendants(pid: int) -> set[tuple[int, float]]:
    out: set[tuple[int, float]] = set()
    look(pid, out)
    return out


def sigint_disposition(pid: int) -> str:
    """What the process does with SIGINT as the kernel has it ("caught", "ignored" or
    "default"), for a Ctrl-C test's failure message: a run that ignores SIGINT (inherited
    ignored at its start) and one that lost the interrupt otherwise look the same there."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return "gone (the process had exited)"
    masks: dict[str, int] = {}
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name in ("SigIgn", "SigCgt"):
            masks[name] = int(value, 16)
    bit = 1 << (signal.SIGINT - 1)  # signal N is bit N-1 of the masks
    return "ignored" if masks["SigIgn"] & bit else "caught" if masks["SigCgt"] & bit else "default"


def still_running(procs: set[tuple[int, float]]) -> list[int]:
    alive: list[int] = []
    for pid, created in procs:
        try:
            p = psutil.Process(pid)
            if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def start_testbed(args: list[str], workdir: Path, command: str = "chaos") -> tuple[subprocess.Popen[bytes], Path, Path]:
    tmpdir = workdir / "tmp"
    tmpdir.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    env.pop("REDIS_URL", None)
    out, err = workdir / "stdout.txt", workdir / "stderr.txt"
    wants_json = command in ("chaos", "replay", "load", "explore") and "--json" not in args
    extra = ["--json", str(workdir / "results.json")] if wants_json else []
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen([*TESTBED, command, *args, *extra], stdout=o, stderr=e, env=env, cwd=workdir)
    return proc, out, err


@dataclass(frozen=True)
class Seen:
    """A process of the run as last seen alive: its parent, its command line (the last
    before it was a zombie, after any exec), its name (`ps -o comm`)."""

    parent: int
    argv: list[str]
    name: str
    session: int = 0
    group: int = 0  # its process group


def look(pid: int, seen: set[tuple[int, float]], processes: dict[int, Seen] | None = None) -> None:
    """Every process below `pid`, as it is now (one walk of the process table): its
    (pid, create time) into `seen` and, if given, what it is into `processes`."""
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                seen.add((child.pid, child.create_time()))
                if processes is not None:
                    before = processes.get(child.pid)
                    argv = child.cmdline() or (before.argv if before else [])
                    groups = os.getsid(child.pid), os.getpgid(child.pid)
                    processes[child.pid] = Seen(child.ppid(), argv, child.name(), *groups)


def finish(
    proc: subprocess.Popen[bytes],
    workdir: Path,
    timeout: float,
    seen: set[tuple[int, float]] | None = None,
    processes: dict[int, Seen] | None = None,
) -> Ran:
    """Waits for the run; with `processes`, records what each process was, every 20 ms
    (a process that lives a moment is seen more often than not)."""
    seen = set() if seen is None else seen
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        look(proc.pid, seen, processes)
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"testbed did not finish within {timeout} s")
        time.sleep(0.05 if processes is None else 0.02)
    results_path = workdir / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else None
    return Ran(
        proc.returncode,
        (workdir / "stdout.txt").read_text(),
        (workdir / "stderr.txt").read_text(),
        workdir / "tmp",
        results,
        seen,
    )


def run_testbed(args: list[str], workdir: Path, timeout: float = 240, command: str = "chaos") -> Ran:
    proc, _, _ = start_testbed(args, workdir, command)
    return finish(proc, workdir, timeout)


def assert_left_nothing(ran: Ran) -> None:
    assert still_running(ran.descendants) == [], "processes left running"
    assert list(ran.tmpdir.iterdir()) == [], "temp dir left behind"


def horse(work: Callable[[], None]) -> int:
    """`work` in a forked child, as a work-horse: its wait status (0: it exited cleanly)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            work()
            code = 0
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1]


def left_alive(pids: Path) -> list[int]:
    """The handlers' leftovers still running (each pid a file in `pids`, as
    tests.support.userjobs:leaves_a_process writes them): a pid that is a `sleep 600` now."""
    running = []
    for entry in pids.iterdir():
        try:
            process = psutil.Process(int(entry.name))
            if process.cmdline() == ["sleep", "600"] and process.status() != psutil.STATUS_ZOMBIE:
                running.append(process.pid)
        except psutil.NoSuchProcess:
            pass
    return running


def kill_part(seen: set[tuple[int, float]], marker: str) -> int:
    """The process of the run whose command line has `marker` and whose parent's has not:
    a process forked without exec (the zygote's workers) keeps its parent's command line."""
    matching = {}
    for pid, _ in seen:
        # Work-horses match the zygote's command line too, and may end at any moment:
        # each process's parent is read while it is known to be there.
        with contextlib.suppress(psutil.NoSuchProcess):
            process = psutil.Process(pid)
            if marker in " ".join(process.cmdline()):
                matching[pid] = (process, process.ppid())
    for pid, (process, parent) in matching.items():
        if parent not in matching:
            process.kill()
            return pid
    raise AssertionError(f"no process of the run matches {marker!r}")
