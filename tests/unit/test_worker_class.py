"""The lab's worker class knows the lab's jobs by their function's name, as RQ names it."""

from rq.utils import import_attribute

from workers.handler import perform
from workers.worker import HANDLER


def test_the_handler_s_name_is_the_handler() -> None:
    # A stale name would fork every work-horse without its worker's connection, silently.
    assert import_attribute(HANDLER) is perform
