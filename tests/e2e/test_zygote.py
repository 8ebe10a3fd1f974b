"""A run's workers are forked by one zygote (workers.zygote), a killed worker's
replacement too, and none outlives the run."""

from pathlib import Path

import pytest

from tests.support.helpers import Seen, assert_left_nothing, finish, start_testbed

pytestmark = pytest.mark.e2e

# Two ops of 20 faulted with kill-worker: two workers killed and replaced.
ARGS = ["--ops", "20", "-s", "retry-only", "-b", "after-effect", "-f", "kill-worker"]


def test_every_worker_and_every_replacement_is_forked_by_the_runs_one_zygote(workdir: Path) -> None:
    proc, _, _ = start_testbed(ARGS, workdir)
    processes: dict[int, Seen] = {}
    ran = finish(proc, workdir, timeout=60, processes=processes)
    assert ran.code == 0, ran.stderr
    row = ran.row("retry-only", "after-effect")
    assert row["effects"] == 22 and row["kills"] == 2
    # Forks keep the zygote's command line: the zygote is the one the testbed started.
    zygotes = [p for p, s in processes.items() if s.argv[1:3] == ["-m", "workers.zygote"] and s.parent == proc.pid]
    assert len(zygotes) == 1
    # Among its children (at import croniter also runs `file`): the workers, named as RQ
    # registers them, the 4 and the 2 that replaced the killed ones.
    forked = {s.name for s in processes.values() if s.parent == zygotes[0]}
    assert {f"rq-worker w{n}" for n in range(1, 7)} <= forked, forked
    # Each worker leads a process group of its own in the zygote's session: one session is
    # one scheduling group where the kernel groups sessions (workers.zygote says why).
    workers = {p: s for p, s in processes.items() if s.parent == zygotes[0] and s.name.startswith("rq-worker")}
    assert {s.session for s in workers.values()} == {processes[zygotes[0]].session}
    assert all(s.group == p for p, s in workers.items())
    assert not [s for s in processes.values() if s.argv[1:3] == ["-m", "workers"]], (
        "a worker ran as its own interpreter"
    )
    assert_left_nothing(ran)
