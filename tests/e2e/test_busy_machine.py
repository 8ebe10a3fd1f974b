"""The lab holds on a machine whose every core is busy: the article's cells all come out."""

from pathlib import Path

import pytest

from tests.support.helpers import assert_left_nothing, run_testbed

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_the_articles_cells_under_a_busy_loop_on_every_core(workdir: Path, busy_cores: int) -> None:
    ran = run_testbed(["--ops", "20"], workdir, timeout=400)  # two faulted ops per cell, as in the full matrix
    assert ran.code == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "12/12 cells as expected" in ran.stdout
    assert {(r["strategy"], r["boundary"]): (r["effects"], r["missingOperations"]) for r in ran.json["rows"]}[
        ("record-before", "before-effect")
    ] == (18, 2)
    assert_left_nothing(ran)
