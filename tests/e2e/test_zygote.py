"""A run's workers are forked by one zygote (workers.zygote), a killed worker's
replacement too, and none outlives the run."""

import contextlib
import time

import psutil
import pytest

from tests.helpers import assert_left_nothing, descendants, finish, start_testbed

pytestmark = pytest.mark.e2e

# Two ops of 20 faulted with kill-worker: two workers killed and replaced.
ARGS = ["--ops", "20", "-s", "retry-only", "-b", "after-effect", "-f", "kill-worker"]


def test_every_worker_and_every_replacement_is_forked_by_the_runs_one_zygote(workdir):
    proc, _, _ = start_testbed(ARGS, workdir)
    seen: set = set()
    parents: dict[int, int] = {}  # pid -> parent pid, for every process of the run seen
    commands: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    while proc.poll() is None:
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    parents[child.pid] = child.ppid()
                    if argv := child.cmdline():  # the last seen (after any exec), before it is a zombie
                        commands[child.pid] = argv
                    names[child.pid] = child.name()
        seen |= descendants(proc.pid)
        time.sleep(0.02)
    ran = finish(proc, workdir, timeout=60, seen=seen)
    assert ran.code == 0, ran.stderr
    row = ran.row("retry-only", "after-effect")
    assert row["effects"] == 22 and row["kills"] == 2
    # Forks keep the zygote's command line: the zygote is the one the testbed started.
    zygotes = [p for p, argv in commands.items() if argv[1:3] == ["-m", "workers.zygote"] and parents[p] == proc.pid]
    assert len(zygotes) == 1
    # Among its children (at import croniter also runs `file`): the workers, named as RQ
    # registers them, the 4 and the 2 that replaced the killed ones.
    forked = {names[p] for p, parent in parents.items() if parent == zygotes[0]}
    assert {f"rq-worker w{n}" for n in range(1, 7)} <= forked, forked
    assert not [argv for argv in commands.values() if argv[1:3] == ["-m", "workers"]], (
        "a worker ran as its own interpreter"
    )
    assert_left_nothing(ran)
