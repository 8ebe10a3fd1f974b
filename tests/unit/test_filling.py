"""How a cell starts (testbed.lab.runner.filling): its first jobs go out ahead of the rest,
every op's intent is stored before its job is enqueued, and the window caps the jobs."""

import pytest

from testbed.lab.runner import CHUNK, HEAD, filling


@pytest.mark.parametrize(
    ("ops", "window"), [(1, None), (30, None), (100, None), (2000, 2000), (5000, 1200), (2500, None)]
)
def test_each_intent_is_stored_before_its_job_and_the_first_jobs_go_out_first(ops: int, window: int | None) -> None:
    steps = filling(ops, window)
    stored: list[int] = []
    enqueued = 0
    for chunk, jobs in steps:
        stored += chunk
        assert enqueued + jobs <= len(stored)  # no job before its op's intent
        assert jobs == 0 or chunk.start == enqueued + 1  # in order, none skipped
        enqueued += jobs
    assert stored == list(range(1, ops + 1))
    assert enqueued == (ops if window is None else min(ops, window))
    assert steps[0][1] == min(ops, HEAD)  # the workers' first jobs, before the rest is even stored
    assert all(len(chunk) <= CHUNK for chunk, _ in steps)
