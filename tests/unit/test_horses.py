"""A work-horse's bounds: what it left in its group stopped and counted, its output capped."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from testbed.errors import UsageError
from testbed.lab.userjobs import prepare
from tests.support.helpers import horse
from workers.horses import Cut, cap_output, cut_of, last_pid, stop_group, stop_strays


def test_an_attempt_within_the_cap_keeps_everything_and_one_past_it_keeps_both_ends() -> None:
    assert cut_of(100, 100 + 64, cap=64) is None
    assert cut_of(100, 100 + 65, cap=64) == Cut(132, 133)
    assert cut_of(0, 1000, cap=64) == Cut(32, 968)


def test_a_log_is_cut_from_the_middle_of_the_attempt_only(tmp_path: Path) -> None:
    log = tmp_path / "w1.log"
    log.write_bytes(b"before\n")
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        start = {fd: os.fstat(fd).st_size}
        os.write(fd, b"head" + b"x" * 1000 + b"tail")
        cap_output(start, cap=8)
    finally:
        os.close(fd)
    note = b"\n[testbed: 1000 bytes of this work-horse's output cut; 8 kept per attempt]\n"
    assert log.read_bytes() == b"before\nhead" + note + b"tail"


def test_the_processes_left_in_a_group_are_stopped_and_counted() -> None:
    leader = subprocess.Popen(["sleep", "600"], process_group=0)
    left = [subprocess.Popen(["sleep", "600"], process_group=leader.pid) for _ in range(2)]
    leader.kill()
    leader.wait()  # reaped, as a worker reaps its work-horse
    try:
        assert stop_group(leader.pid) == 2
        assert [p.wait(10) for p in left] == [-9, -9]
        assert stop_group(leader.pid) == 0
    finally:
        for p in left:
            p.kill()
            p.wait()


def test_a_pool_child_stops_what_its_task_left_in_its_group_and_its_own_children_only() -> None:
    def pool_child() -> None:
        os.setpgrp()  # as a worker's group, this process its pool child
        found = subprocess.Popen(["sleep", "600"])  # there as the pool child started: not the task's
        since = last_pid()  # as the attempt starts
        left = [subprocess.Popen(["sleep", "600"], process_group=group) for group in (None, 0)]
        try:
            assert stop_strays({os.getpid(), found.pid}, since) == 2
            assert [p.wait(10) for p in left] == [-9, -9] and found.poll() is None
            assert stop_strays({os.getpid(), found.pid}, since) == 0
            # Pids that wrapped around since: every process is read, the spared spared.
            left.append(subprocess.Popen(["sleep", "600"]))
            assert stop_strays({os.getpid(), found.pid}, left[-1].pid + 10**9) == 1 and left[-1].wait(10) == -9
        finally:
            for p in (found, *left):
                p.kill()
                p.wait()

    assert horse(pool_child) == 0


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), 3601])
def test_an_import_timeout_out_of_range_is_refused(seconds: float) -> None:
    with pytest.raises(UsageError, match="--import-timeout must be"):
        prepare([], [], import_timeout=seconds)
