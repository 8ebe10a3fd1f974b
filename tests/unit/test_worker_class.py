"""The lab's worker class knows the lab's jobs by their function's name, as RQ names it."""

from rq.utils import import_attribute

from workers.handler import perform
from workers.specs import HANDLER
from workers.worker import Worker


def test_the_handler_s_name_is_the_handler() -> None:
    # A stale name would fork every work-horse without its worker's connection, silently.
    assert import_attribute(HANDLER) is perform


class _Job:
    def __init__(self, func_name: str, args: tuple[object, ...]) -> None:
        self.func_name = func_name
        self.args = args


def test_the_connection_is_kept_for_the_lab_s_jobs_only() -> None:
    assert Worker.kept_for(_Job(HANDLER, ({"provider": "http+unix://%2Frun%2Fp.sock"}, "op-1", 1))) == (
        "http+unix://%2Frun%2Fp.sock"
    )
    assert Worker.kept_for(_Job("noop_job.noop", ())) is None  # raw RQ's jobs in the benchmarks fork as RQ forks them
