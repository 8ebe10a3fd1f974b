"""An RQ worker that records what each of its work-horses cost, for `job_profile.py`.

    RQ_WORKER_CLASS=timed_worker.TimedWorker  (with this folder on PYTHONPATH)

Per work-horse, one line in $JOB_PROFILE_DIR/<pid>: the CPU it had used on
entering RQ's `main_work_horse` (the fork's return) and on calling
`os._exit` (`time.process_time`, exact), the lab's handler inside it, its
minor page faults, and the whole work-horse as the kernel reports it to its
worker (`os.wait4`: fork to exit, the teardown included). For measuring only:
it patches `os._exit` in the work-horse and wraps the lab's handler.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from typing import Any

from rq.worker import Worker

OUT = os.environ.get("JOB_PROFILE_DIR", ".")
_handler = [0.0]

# The lab's workers preload its handler before RQ loads this class; raw RQ's workers do not,
# and must not be given it here.
_lab = sys.modules.get("workers.handler")
if _lab is not None:
    _perform = _lab.perform

    def _timed_perform(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return _perform(*args, **kwargs)
        finally:
            _handler[0] = time.process_time() - started

    _lab.perform = _timed_perform  # type: ignore[attr-defined]


class TimedWorker(Worker):
    def main_work_horse(self, job: Any, queue: Any) -> None:
        entered = time.process_time()
        exit_now = os._exit

        def _exit(code: int) -> None:
            left = time.process_time()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            with open(os.path.join(OUT, f"{os.getpid()}.horse"), "w") as out:
                out.write(f"{entered} {left - entered} {_handler[0]} {faults}")
            exit_now(code)

        os._exit = _exit
        super().main_work_horse(job, queue)

    def wait_for_horse(self) -> Any:
        pid, status, usage = super().wait_for_horse()
        if usage is not None:
            with open(os.path.join(OUT, f"{pid}.whole"), "w") as out:
                out.write(f"{usage.ru_utime + usage.ru_stime}")
        return pid, status, usage
