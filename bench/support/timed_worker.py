"""An RQ worker of the lab's class that records what each of its work-horses cost, for `job_profile.py`.

    RQ_WORKER_CLASS=bench.support.timed_worker.TimedWorker  (with the project's root on PYTHONPATH)

Per work-horse, one line in $JOB_PROFILE_DIR/<pid>.horse: the CPU it had
used on entering RQ's `main_work_horse` (the fork's return) and on calling
`os._exit` (`time.process_time`, exact), its minor page faults, then the
CPU and the page faults of the lab's handler and of its parts (SEGMENTS);
and in <pid>.whole the whole work-horse as the kernel reports it to its
worker (`os.wait4`: fork to exit, the teardown included). For measuring
only: it patches `os._exit` in the work-horse and wraps the lab's functions
(in the worker, when it is made).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

from workers.worker import Worker

OUT = os.environ.get("JOB_PROFILE_DIR", ".")

# The handler and its parts, as the work-horse calls them: (module, owner, attribute).
SEGMENTS = {
    "handler": ("workers.handler", None, "perform"),
    "first": ("workers.handler", None, "open_attempt"),  # count the attempt, read intent, plan, marker
    "request": ("workers.client", None, "send"),  # the provider's send, its connection included
    "last": ("workers.markers", "Markers", "finish"),  # the last marker and the outcome
}
_spent = {name: [0.0, 0] for name in SEGMENTS}


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        cpu, faults = time.process_time(), minor_faults()
        try:
            return function(*args, **kwargs)
        finally:
            _spent[name][0] += time.process_time() - cpu
            _spent[name][1] += minor_faults() - faults

    return timed


def _wrap_segments() -> None:
    """The lab's functions timed, once per worker process, when its worker is made (not at
    import: `fault_lines.py` imports this module for `minor_faults`). The lab's workers
    preload its handler; raw RQ's workers do not, and must not be given it here."""
    global _wrapped
    if _wrapped or "workers.handler" not in sys.modules:
        return
    _wrapped = True
    for name, (module, owner, attribute) in SEGMENTS.items():
        holder = getattr(sys.modules[module], owner) if owner else sys.modules[module]
        setattr(holder, attribute, _timed(name, getattr(holder, attribute)))


_wrapped = False


class TimedWorker(Worker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _wrap_segments()

    def main_work_horse(self, job: Any, queue: Any) -> None:
        entered = time.process_time()
        exit_now = os._exit

        def _exit(code: int) -> None:
            left = time.process_time()
            spent = " ".join(f"{cpu} {faults}" for cpu, faults in _spent.values())
            with open(os.path.join(OUT, f"{os.getpid()}.horse"), "w") as out:
                out.write(f"{entered} {left - entered} {minor_faults()} {spent}")
            exit_now(code)

        os._exit = _exit  # type: ignore[assignment]  # os._exit is typed NoReturn; the stand-in ends the process too
        super().main_work_horse(job, queue)

    def wait_for_horse(self) -> Any:
        pid, status, usage = super().wait_for_horse()
        if usage is not None:
            with open(os.path.join(OUT, f"{pid}.whole"), "w") as out:
                out.write(f"{usage.ru_utime + usage.ru_stime}")
        return pid, status, usage
