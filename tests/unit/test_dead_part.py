"""A failed call on a part's death names the part, even when the death shows a moment later."""

from collections.abc import Callable

import pytest
import redis

from testbed.infra.liveness import PartDied
from testbed.lab.runner import name_a_dead_part


def dies_on(call: int) -> tuple[Callable[[], None], list[None]]:
    calls: list[None] = []

    def check() -> None:
        calls.append(None)
        if len(calls) >= call:
            raise PartDied("the private redis-server (pid 1) died during the run (killed by SIGKILL)")

    return check, calls


def test_a_death_that_shows_late_is_still_named() -> None:
    check, calls = dies_on(3)
    with pytest.raises(PartDied, match="redis-server"):
        name_a_dead_part(check, within=5.0)
    assert len(calls) == 3


def test_with_every_part_alive_it_gives_up_after_the_grace() -> None:
    check, calls = dies_on(10**6)
    name_a_dead_part(check, within=0.1)
    assert 1 < len(calls) < 10**6


def test_a_check_that_cannot_reach_its_parts_says_nothing() -> None:
    def check() -> None:
        raise redis.ConnectionError("Connection refused")

    name_a_dead_part(check, within=5.0)  # returns at once: the failed call speaks for itself
