"""A stored run's report.html: its files read (results.json, history.jsonl and
the provider's log, and a destination's records, each read-only), the page rendered (`html.render`)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testbed.report import destination, effects, html
from testbed.store import results
from testbed.store.history import read_history
from testbed.store.layout import RESULTS


def of_run(run: Path) -> str:
    with collector_paused():
        found = destination.read(run)
        return html.render(results.read(run / RESULTS), read_history(run), effects.read(run), at_destination=found)


@contextmanager
def collector_paused() -> Iterator[None]:
    """A long run's history and provider log are hundreds of thousands of small records held at
    once, none of them in a cycle: the cyclic collector would walk them again and again as they
    are made (most of the time a 100,000-op run's report took)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
